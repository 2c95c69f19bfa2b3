"""Shaped advantages (POST /v1/distill/advantages, trainers): log-probs in, per-token
advantages, per-token rewards, per-step signals and diagnostics out; the arithmetic
is service.distill.signals."""
