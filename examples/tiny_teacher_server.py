"""A teacher endpoint for the examples: any Hugging Face causal LM served over the
part of vLLM's OpenAI-compatible HTTP API that Reflexa's teacher scoring uses
(``teacher.protocol: openai_completions``, the default), in a thread.

    with serve_completions(model, tokenizer) as teacher:
        ...  # start Reflexa with REFLEXA_TEACHER__BASE_URL=teacher.url

Routes, in vLLM's shapes (vllm/entrypoints/openai/completion/protocol.py and
vllm/entrypoints/serve/tokenize/protocol.py):

- ``POST /v1/completions``: ``prompt`` as token ids, a list of them, or a text;
  ``prompt_logprobs`` k (-1: the whole vocabulary) answers, per choice,
  ``prompt_logprobs``: ``None`` for the first position, then for every later
  position ``{token_id: {logprob, rank, decoded_token}}`` holding the token itself
  and the k likeliest (vLLM's rank: 1 + the number of tokens more likely).
  With ``max_tokens`` > 0 one token is generated, greedily (Reflexa asks for 1).
  One forward pass per request, its prompts padded into one batch: log π(ids[p] |
  ids[:p]) is row p-1 of the log-softmax.
- ``POST /tokenize``: ``{prompt, add_special_tokens}`` (default true) or
  ``{messages, add_generation_prompt}`` (a ``[role]`` transcript, the way
  Reflexa's plain context text is written) → ``{count, max_model_len, tokens}``.
- ``GET /v1/models``.

Not a server to deploy: no auth, no streaming, one model, CPU or whatever device
the model is on. The lock, when given, is held around every forward pass, so a
trainer updating the same model in place (the policy as its own teacher) can take
it too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

MIN_LOGPROB = -9999.0  # vLLM clamps -inf to this in its answers


@dataclass
class TeacherEndpoint:
    """A running endpoint: its root URL, and counters of what it served."""

    url: str
    model_name: str
    requests: int = 0
    sequences: int = 0
    tokens: int = 0
    counter_lock: threading.Lock = field(default_factory=threading.Lock)


def _chat_text(messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> str:
    turns = [f"[{m.get('role', 'user')}]\n{m.get('content', '')}" for m in messages]
    if add_generation_prompt:
        turns.append("[assistant]")
    return "\n\n".join(turns)


class _Scorer:
    def __init__(self, model: Any, tokenizer: Any, lock: AbstractContextManager[Any] | None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.lock = lock if lock is not None else nullcontext()
        self.vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        self.names = [tokenizer.id_to_token(t) or "" for t in range(self.vocab)]
        self.max_len = int(getattr(model.config, "max_position_embeddings", 2048))

    def log_softmax(self, prompts: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per prompt [len, vocab]: row p is log π(· | ids[:p+1]); one padded forward pass."""
        device = next(self.model.parameters()).device
        longest = max(len(ids) for ids in prompts)
        batch = torch.zeros((len(prompts), longest), dtype=torch.long)
        mask = torch.zeros_like(batch)
        for b, ids in enumerate(prompts):
            batch[b, : len(ids)] = torch.tensor(list(ids))
            mask[b, : len(ids)] = 1
        with self.lock, torch.no_grad():
            logits = self.model(input_ids=batch.to(device), attention_mask=mask.to(device)).logits
        rows = torch.log_softmax(logits.float(), dim=-1).cpu()
        return [rows[b, : len(ids)] for b, ids in enumerate(prompts)]

    def positions(self, ids: Sequence[int], rows: torch.Tensor, k: int) -> list[dict[str, Any] | None]:
        """vLLM's prompt_logprobs: None first, then the token itself and the top k per position."""
        if len(ids) < 2:
            return [None] * len(ids)
        targets = list(ids[1:])
        scores = rows[: len(ids) - 1]
        chosen = scores.gather(1, torch.tensor(targets)[:, None])[:, 0]
        ranks = ((scores > chosen[:, None]).sum(dim=1) + 1).tolist()
        entries = [{str(t): self._entry(t, lp, r)} for t, lp, r in zip(targets, chosen.tolist(), ranks, strict=True)]
        width = scores.shape[1] if k == -1 else min(max(k, 0), scores.shape[1])
        if width:
            values, indices = torch.topk(scores, width, dim=1)
            for entry, top_ids, top_values in zip(entries, indices.tolist(), values.tolist(), strict=True):
                for r, (t, lp) in enumerate(zip(top_ids, top_values, strict=True)):
                    entry.setdefault(str(t), self._entry(t, lp, r + 1))
        return [None, *entries]

    def _entry(self, token: int, logprob: float, rank: int) -> dict[str, Any]:
        return {"logprob": max(logprob, MIN_LOGPROB), "rank": rank, "decoded_token": self.names[token]}

    def completions(self, body: dict[str, Any]) -> tuple[int, Any, int, int]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [self.tokenizer.encode(prompt).ids]
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, list) and p for p in prompt):
            prompts = prompt
        else:
            return _error(400, "Either prompt or prompt_embeds must be provided and non-empty."), 0, 0
        for ids in prompts:
            if any(not isinstance(t, int) or t < 0 or t >= self.vocab for t in ids):
                return _error(400, f"token id out of vocabulary (size {self.vocab})"), 0, 0
            if len(ids) > self.max_len:
                return _error(400, f"this model's maximum context length is {self.max_len} tokens"), 0, 0
        k = body.get("prompt_logprobs")
        max_tokens = int(body.get("max_tokens") or 0)
        choices = []
        for index, (ids, rows) in enumerate(zip(prompts, self.log_softmax(prompts), strict=True)):
            generated = [int(torch.argmax(rows[-1]))] if max_tokens else []
            choices.append(
                {
                    "index": index,
                    "text": " ".join(self.names[t] for t in generated),
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "prompt_logprobs": self.positions(ids, rows, int(k)) if k is not None else None,
                }
            )
        n = sum(len(p) for p in prompts)
        answer = {
            "id": f"cmpl-{time.monotonic_ns()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": choices,
            "usage": {"prompt_tokens": n, "completion_tokens": len(choices), "total_tokens": n + len(choices)},
        }
        return (200, answer), len(prompts), n

    def tokenize(self, body: dict[str, Any]) -> tuple[int, Any]:
        if isinstance(body.get("messages"), list):
            text = _chat_text(body["messages"], bool(body.get("add_generation_prompt", True)))
            ids = self.tokenizer.encode(text, add_special_tokens=bool(body.get("add_special_tokens", False))).ids
        elif isinstance(body.get("prompt"), str):
            ids = self.tokenizer.encode(
                body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True))
            ).ids
        else:
            return _error(400, "give prompt (a text) or messages")
        return 200, {"count": len(ids), "max_model_len": self.max_len, "tokens": ids, "token_strs": None}


def _error(status: int, message: str) -> tuple[int, Any]:
    return status, {"error": {"message": message, "type": "BadRequestError", "code": status}}


@contextmanager
def serve_completions(
    model: Any,
    tokenizer: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str = "tiny",
    lock: AbstractContextManager[Any] | None = None,
) -> Iterator[TeacherEndpoint]:
    """Serve ``model`` (a causal LM whose forward returns ``.logits``) and ``tokenizer``
    (a ``tokenizers.Tokenizer``) on ``host:port`` (0: a free port) until the block ends."""
    scorer = _Scorer(model, tokenizer, lock)

    class Handle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._answer(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            else:
                self._answer(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            except ValueError:
                self._answer(400, _error(400, "the body is not JSON")[1])
                return
            if not isinstance(body, dict):
                self._answer(400, _error(400, "the body is not a JSON object")[1])
                return
            if self.path == "/v1/completions":
                (status, answer), sequences, tokens = scorer.completions(body)
                with endpoint.counter_lock:
                    endpoint.requests += 1
                    endpoint.sequences += sequences
                    endpoint.tokens += tokens
            elif self.path == "/tokenize":
                status, answer = scorer.tokenize(body)
            else:
                status, answer = 404, {"detail": "Not Found"}
            self._answer(status, answer)

    server = ThreadingHTTPServer((host, port), Handle)
    server.daemon_threads = True
    endpoint = TeacherEndpoint(f"http://{host}:{server.server_address[1]}", model_name)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
