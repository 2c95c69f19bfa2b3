"""The words of agent contexts, shared by every producer of prompts: the versioned
context templates (templates.py, templates/<name>/) and the plain context of a step
(plain.py), which the distill contexts (service.distill) and the SFT dataset
(service.export) both render, so a policy trained on the one is run on the other."""
