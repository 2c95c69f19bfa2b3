"""bench.retrieval: retrieve latency, throughput, index build and ingest-to-searchable
at several store sizes, against the raw floor and mem0; bench.retrieval.quality:
recall of the ranking modes on near-query sets."""
