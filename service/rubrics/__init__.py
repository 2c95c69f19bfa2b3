"""Rubric rewards: rubrics, scoring, reward capabilities (OpenRLHF)."""
