"""The operator's reads, one module per page family (service/operator): overview,
review queue, retrieval log, learning."""
