"""bench.ingest: trajectories and steps written over HTTP, against the raw SQL floor."""
