"""Teacher scoring: the teacher endpoint's log-probs of a student's sampled tokens."""
