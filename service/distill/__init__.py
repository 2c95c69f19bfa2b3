"""Teacher contexts for on-policy distillation (POST …/distill/contexts):
per step, the plain context and each teacher's privileged context."""
