"""The gateway for outside agents: an OpenAI ``base_url`` per episode, served by the policy
being trained, whose calls are recorded as exact tokens and turned into samples."""
