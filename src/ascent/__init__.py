"""ascent: reinforcement-learning post-training for large language models.

Layers, lowest first (a lower layer never imports a higher one):
``ascent.batch`` (the record that flows everywhere) and ``ascent.algos`` (pure RL math).
"""

__version__ = "0.1.0.dev0"
