"""The training loops (SFT, and RL next), with checkpoints, tracking and evaluation."""
