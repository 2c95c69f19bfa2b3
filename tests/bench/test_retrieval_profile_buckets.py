"""bench.retrieval --profile charges each py-spy sample to the bucket of the innermost
frame it names (bench/retrieval/profile.py): a bucket whose function was renamed
silently hands its samples to its caller's bucket, as the retrieve path's SQL
buckets once did. Every name must still be a function or method py-spy can print."""

from __future__ import annotations

import importlib
import inspect

from bench.retrieval.profile import PROFILE_BUCKETS

# Where the functions the buckets name live: ours and the framework's.
MODULES = (
    "asyncio.runners",
    "uvicorn.protocols.http.httptools_impl",
    "fastapi.dependencies.utils",
    "fastapi.routing",
    "starlette.concurrency",
    "anyio._backends._asyncio",
    "service.retrieval.service",
    "service.retrieval.ranking",
    "service.namespaces.service",
    "store.index_registry",
    "store.embedding.onnx",
    "store.embedding.cache",
    "store.vectors.index",
    "store.lexical",
    "service.retrieval.repository",
    "store.retrievals",
    "store.evidence",
    "store.database",
)


def _qualnames() -> set[str]:
    """`function` and `Class.method` names, as py-spy prints frames."""
    names: set[str] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            # a cached function (functools.lru_cache) runs, and py-spy prints, the one it wraps
            if inspect.isfunction(inspect.unwrap(obj) if hasattr(obj, "__wrapped__") else obj):
                names.add(name)
            elif inspect.isclass(obj):
                names.update(f"{obj.__name__}.{attr}" for attr, v in vars(obj).items() if inspect.isfunction(v))
    return names


def test_every_bucket_names_a_function_that_exists() -> None:
    known = _qualnames()
    missing = [name for _, names in PROFILE_BUCKETS for name in names if name not in known]
    assert missing == []
