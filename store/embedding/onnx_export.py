"""Export a local sentence-transformers model's transformer to ONNX, once, into a
cache directory shared by every process on the machine.

This is the only module of the ONNX path that needs torch, and it imports it only
when an export actually runs: once the file exists, a serving process finds it and
never loads torch (400 MB to 750 MB of resident memory saved).

The file name carries a digest of the model's content fingerprint and of the export
recipe, so a changed model or recipe gets a new file instead of a stale one. Exports
are serialised by an advisory file lock and written to a temporary file that is
renamed into place, so processes starting together never see a half-written model.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import logging
import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from store.embedding.local_model import LocalModel

log = logging.getLogger(__name__)

# Bump when the export code below changes what it writes: older files are then
# ignored rather than reused.
EXPORT_RECIPE = "torchscript-opset17-eager-v1"
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"


def onnx_path(model: LocalModel, cache_dir: Path) -> Path:
    """Where the export of `model` lives in `cache_dir`: `<name>-<digest>.onnx`."""
    digest = hashlib.sha256(f"{model.fingerprint}:{EXPORT_RECIPE}".encode()).hexdigest()[:16]
    return cache_dir / f"{model.name}-{digest}.onnx"


def export_onnx(model: LocalModel, cache_dir: Path, *, unusable: os.stat_result | None = None) -> Path:
    """Return the path of the ONNX export of `model`, exporting it first if needed.

    `unusable` is the stat of a file at that path which the caller found it could
    not load: it is then replaced, unless another process already replaced it (the
    file on disk is no longer the one that was stat'ed).
    """
    target = onnx_path(model, cache_dir)
    if _is_reusable(target, unusable):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.with_name(target.name + ".lock")):
        if _is_reusable(target, unusable):  # another process exported it while we waited
            return target
        tmp = target.with_name(f"{target.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
        try:
            log.info("exporting %s to ONNX at %s (once per model)", model.path, target)
            _export(model, tmp)
            with tmp.open("rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def _is_reusable(target: Path, unusable: os.stat_result | None) -> bool:
    try:
        current = target.stat()
    except FileNotFoundError:
        return False
    if unusable is None:
        return True
    identity = (current.st_ino, current.st_mtime_ns, current.st_size)
    return identity != (unusable.st_ino, unusable.st_mtime_ns, unusable.st_size)


@contextmanager
def _exclusive_lock(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_file`; released when the process dies too,
    so a killed exporter never leaves the others waiting."""
    with lock_file.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _export(model: LocalModel, destination: Path) -> None:
    """Trace the transformer with the TorchScript exporter (`dynamo=False`: it needs
    only the `onnx` package, not onnxscript) with dynamic batch and sequence axes.

    Eager attention traces to plain ONNX ops. The example batch has a padded row so
    the attention-mask path is part of the traced graph. The exporter's warnings
    (legacy-exporter deprecation, a shape check that is constant for inputs of equal
    length) are silenced; the tests check the exported vectors against torch.
    """
    import torch
    from transformers import AutoModel

    transformer = AutoModel.from_pretrained(str(model.path), local_files_only=True, attn_implementation="eager")
    transformer.eval()
    takes_token_types = "token_type_ids" in inspect.signature(transformer.forward).parameters

    class HiddenStates(torch.nn.Module):
        """Keyword-only call into the transformer, returning only the token states."""

        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> torch.Tensor:
            extra = {"token_type_ids": token_type_ids} if takes_token_types else {}
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    input_ids = torch.full((2, 8), 1000, dtype=torch.long)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    dynamic = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            HiddenStates(),
            (input_ids, attention_mask, torch.zeros_like(input_ids)),
            str(destination),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
