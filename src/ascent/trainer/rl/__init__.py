"""The RL trainer: ``ascent train CONFIG key=value ...``."""
