"""Micro-benchmarks of the embedding path, each its own module: encoders
(`python -m bench.embedding.encoders`), query_encoding and vector_index."""
