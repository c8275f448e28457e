"""Mixture-of-experts models: their routers' choices recorded during a forward, the
load-balancing loss and the expert-load metrics computed from them."""
