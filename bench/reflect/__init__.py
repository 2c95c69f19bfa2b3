"""bench.reflect: the reflection workers draining a backlog, their raw floor, and queue
lag under steady ingest."""
