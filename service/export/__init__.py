"""Dataset exports for trainers (GET /v1/namespaces/{ns}/export)."""
