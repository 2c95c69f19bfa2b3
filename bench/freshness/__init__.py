"""bench.freshness: ingest to searchable on `reflexa serve` defaults."""
