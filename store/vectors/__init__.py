"""Vector indexes derived from SQL embeddings (placeholder docstring, replaced with the benchmark)."""

from store.vectors.fileformat import CorruptIndexError
from store.vectors.index import IndexConfig, VectorIndex

__all__ = ["CorruptIndexError", "IndexConfig", "VectorIndex"]
