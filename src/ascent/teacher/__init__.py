"""On-policy distillation's teacher: the shared-vocabulary check and the teacher behind an
OpenAI endpoint."""
