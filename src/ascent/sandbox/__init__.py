"""Running untrusted code: resource limits, namespaces where allowed, a pool."""
