"""bench.advantages' teacher: the tiny vLLM-protocol server of the teacher tests
(tests/service/distill/teacher/teacher_servers.py: a randomly initialised 2-layer Llama with a
64-token vocabulary, its WordLevel tokenizer.json, /v1/completions with
prompt_logprobs and /tokenize in vLLM's shape) in a process of its own, and what is
measured against it: `POST …/distill/teacher_logprobs` through Reflexa, and the same
scoring calls sent to the endpoint directly (the floor).

    python -m bench.advantages.teacher WORK_DIR   # serve until SIGTERM; writes WORK_DIR/teacher.url

The server is the tests' own (imported, not copied): one model forward pass per
sequence, under a lock, on one CPU thread; its answer lists every prompt position.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import REPO
from bench.common.processes import stop_group

URL_FILE = "teacher.url"
TOKENIZER_FILE = "teacher-tokenizer.json"
PROTOCOL = "openai_completions"  # vLLM's /v1/completions with prompt_logprobs (TeacherSettings' default mode)
FIRST_WORD = 6  # token ids below are the tokenizer's special tokens


@dataclass(frozen=True)
class TeacherShape:
    items: int
    continuation: int  # tokens per item
    context: int  # tokens per context (a text context: this many words, plus the BOS)


@dataclass
class Teacher:
    url: str
    tokenizer_file: Path

    def env(self) -> dict[str, str]:
        """The Reflexa server's settings for this teacher (TeacherSettings; the rest defaults)."""
        return {
            "REFLEXA_TEACHER__BASE_URL": self.url,
            "REFLEXA_TEACHER__PROTOCOL": PROTOCOL,
            "REFLEXA_TEACHER__MODEL": "tiny",
            "REFLEXA_TEACHER__TOKENIZER_FILE": str(self.tokenizer_file),
            "REFLEXA_TEACHER__TIMEOUT_SECONDS": "600",
        }


@contextlib.contextmanager
def teacher_server(work: Path, timeout_s: float = 120.0) -> Iterator[Teacher]:
    """The tiny teacher in a process group of its own, stopped (SIGTERM, then SIGKILL) on exit."""
    work.mkdir(parents=True, exist_ok=True)
    (work / URL_FILE).unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = work / "teacher.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.advantages.teacher", str(work)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not (work / URL_FILE).exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"teacher server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield Teacher((work / URL_FILE).read_text().strip(), work / TOKENIZER_FILE)
    finally:
        stop_group(proc)


# -- the batch -------------------------------------------------------------------------------


def items(shape: TeacherShape, tokenizer_file: Path, contexts: str, seed: int = 5) -> list[dict[str, Any]]:
    """`shape.items` items, each a continuation of token ids after a context of
    `shape.context` tokens given as token ids (`contexts` "token_ids") or as a text of
    that many words of the vocabulary (`contexts` "text", tokenized by Reflexa with
    the tokenizer file, its BOS added)."""
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab(with_added_tokens=True)
    size = len(vocab)
    words = [w for w, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i >= FIRST_WORD]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(shape.items):
        if contexts == "text":
            context: dict[str, Any] = {"text": " ".join(rng.choice(words, shape.context))}
        else:
            context = {"token_ids": rng.integers(FIRST_WORD, size, shape.context).tolist()}
        continuation = rng.integers(FIRST_WORD, size, shape.continuation).tolist()
        out.append({"id": f"item-{i}", "context": context, "continuation": {"token_ids": continuation}})
    return out


# -- through Reflexa ---------------------------------------------------------------------------


@dataclass
class TeacherRun:
    seconds: float  # the request sent -> its whole answer received, at the client
    total_ms: float  # the answer's timing: the request on the server's side
    endpoint_ms: float  # … wall time with a scoring call to the endpoint in flight
    tokenize_ms: float
    requests: int  # scoring calls the server made
    items: int
    scored_tokens: int
    prompt_tokens: int  # summed over items


def post_teacher_logprobs(client: httpx.Client, ns: str, raw: bytes) -> TeacherRun:
    t0 = time.perf_counter()
    r = client.post(f"/v1/namespaces/{ns}/distill/teacher_logprobs", content=raw)
    seconds = time.perf_counter() - t0
    r.raise_for_status()
    body = r.json()
    timing = body["timing"]
    return TeacherRun(
        seconds=seconds,
        total_ms=timing["total_ms"],
        endpoint_ms=timing["endpoint_ms"],
        tokenize_ms=timing["tokenize_ms"],
        requests=timing["requests"],
        items=len(body["items"]),
        scored_tokens=sum(len(item["logprobs"]) for item in body["items"]),
        prompt_tokens=sum(item["prompt_tokens"] for item in body["items"]),
    )


# -- the floor: the same scoring calls, straight to the endpoint --------------------------------


@dataclass
class DirectRun:
    seconds: float  # tokenizing (text contexts) + every scoring call, as many in flight as Reflexa allows
    tokenize_s: float
    requests: int


class DirectClient:
    """The scoring calls Reflexa makes for a batch (the protocol's request bodies, in
    batches of teacher.max_batch, teacher.max_concurrency in flight), sent from here
    over one kept-alive connection pool; the answers read, not parsed."""

    def __init__(self, teacher: Teacher) -> None:
        from service.distill.teacher.protocols import build_protocol
        from service.distill.teacher.tokenize import TokenizerFiles
        from service.settings import TeacherSettings

        self.settings = TeacherSettings(
            base_url=teacher.url, protocol=PROTOCOL, model="tiny", tokenizer_file=str(teacher.tokenizer_file)
        )
        self.protocol = build_protocol(self.settings)
        self.tokenizer = TokenizerFiles().get(str(teacher.tokenizer_file))
        limits = httpx.Limits(max_connections=self.settings.max_concurrency)
        self.client = httpx.Client(base_url=teacher.url, timeout=600, limits=limits)

    def close(self) -> None:
        self.client.close()

    def run(self, batch_items: list[dict[str, Any]]) -> DirectRun:
        from service.distill.teacher.protocols import Scored, Want

        t0 = time.perf_counter()
        sequences = []
        for item in batch_items:
            c = item["context"]
            prompt = c["token_ids"] if "token_ids" in c else self.tokenizer.encode(c["text"], special=True)
            sequences.append(Scored(prompt, item["continuation"]["token_ids"]))
        tokenize_s = time.perf_counter() - t0
        size = self.settings.max_batch
        batches = [sequences[i : i + size] for i in range(0, len(sequences), size)]

        def post(batch: list[Scored]) -> int:
            r = self.client.post(self.protocol.path, json=self.protocol.request(batch, Want()))
            r.raise_for_status()
            return len(r.content)

        with ThreadPoolExecutor(max_workers=max(1, min(self.settings.max_concurrency, len(batches)))) as pool:
            list(pool.map(post, batches))
        return DirectRun(time.perf_counter() - t0, tokenize_s, len(batches))


def _serve(work: Path) -> None:
    import torch

    from tests.service.distill.teacher.teacher_servers import TinyLM, serve, write_tokenizer

    torch.set_num_threads(1)
    tokenizer = write_tokenizer(work / TOKENIZER_FILE)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve("vllm", TinyLM(), tokenizer) as server:
        (work / (URL_FILE + ".tmp")).write_text(server.url)
        (work / (URL_FILE + ".tmp")).rename(work / URL_FILE)
        stop.wait()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
