"""The training ablation: does memory make a policy learn faster than GRPO alone?
The design (fixed before the runs) is in docs/trainers.md, "Does it help?"."""
