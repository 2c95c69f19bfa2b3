"""Shaped advantages from log-probs the trainer supplies (POST /v1/distill/advantages):
pure numpy, no I/O, vectorised over the whole batch (docs/distillation.md writes out
every formula, its paper, its parameters and a worked example).

- outcome.py: the outcome advantage A (the trainer's own, else GRPO's or RLOO's), its
  scale (group / batch / none) and the conventions for groups of one and null rewards;
- off_policy.py: the reference-KL penalty (params.kl) and the off-policy weights
  (params.is: TIS / MIS, token / sequence level), on any method;
- token_signal.py: token_signal and direct_opd, and the regulators (entropy rule,
  log compression, clipping) and discounted future sums;
- step_shaping.py: step_shaping (StepOPSD) and horizon_agreement (TurnSight);
- diagnostics.py: order consistency, length correlation, shares clipped, tails;
- batch.py: the flattened batch and the segment arithmetic all of them use;
- compute.py: the entry point.
"""

from service.distill.signals.batch import TokenBatch, TrajectoryTokens, concat
from service.distill.signals.compute import Needs, Result, compute, compute_groups, needs
from service.distill.signals.params import DEFAULT_NAME, METHODS, PARAMS, Method, Params

__all__ = [
    "DEFAULT_NAME",
    "METHODS",
    "PARAMS",
    "Method",
    "Needs",
    "Params",
    "Result",
    "TokenBatch",
    "TrajectoryTokens",
    "compute",
    "compute_groups",
    "concat",
    "needs",
]
