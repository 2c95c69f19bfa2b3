"""Real HTTP teacher servers for the tests, one per protocol, backed by a tiny
randomly initialised Hugging Face causal LM (a LlamaConfig with a 64-token
vocabulary, built on the CPU torch from a fixed seed, nothing downloaded) and a
WordLevel tokenizer.json made with `tokenizers`.

Each server computes the log-probs of the whole sequence with the model, as those
servers do (one forward pass over prompt + continuation; log_softmax of the logits;
the log-prob of token p is row p-1's entry for it) and answers in the protocol's
own shape, taken from the projects' source:

- vLLM /v1/completions and /tokenize: vllm/entrypoints/openai/completion/protocol.py
  (CompletionRequest: prompt as token ids or lists of them, echo, logprobs,
  max_tokens, prompt_logprobs, return_tokens_as_token_ids; CompletionResponseChoice:
  index, text, logprobs {text_offset, token_logprobs, tokens, top_logprobs},
  finish_reason, prompt_logprobs [None | {token_id: {logprob, rank,
  decoded_token}}]) at vllm-project/vllm 002032ee2b18; completion/serving.py
  (request_output_to_completion_response: with echo the prompt's logprobs come
  first, the first None; _create_completion_logprobs: top_logprobs holds the first
  logprobs+1 entries, the token itself first; -inf clamped to -9999.0) at 030ea52e;
  serve/tokenize/protocol.py (TokenizeCompletionRequest, TokenizeChatRequest,
  TokenizeResponse {count, max_model_len, tokens}) at 030ea52e. vLLM's Logprob rank
  is 1 + the number of tokens more likely.
- SGLang /generate: python/sglang/srt/managers/io_struct.py (GenerateReqInput:
  input_ids flat or batched, return_logprob, logprob_start_len, top_logprobs_num,
  return_text_in_logprobs; a batch answers a list) at sgl-project/sglang
  001067fffe33; managers/scheduler_output_processor_mixin.py at 5294b03c
  (_process_input_token_logprobs: `[None] + input_token_logprobs[:-1]`, token ids
  `origin_input_ids[logprob_start_len:]`: the entry at the start is always None);
  managers/tokenizer_manager.py at c60799d0 (detokenize_logprob_tokens: (logprob,
  token_id, None) without text).
- TRL /get_sequence_logprobs/: trl/scripts/vllm_serve.py at huggingface/trl
  f2cd57710ae3 (SequenceLogprobsRequest {sequences, prompt_lengths, top_logprobs,
  temperature, response_format}; SequenceLogprobsResponse; _format_logprob_response,
  json: per completion position the prompt_logprobs entries sorted by rank, their
  token ids alongside, NaN as None; a bad request raises ValueError, which the
  server answers 500). TRL 1.16 (installed here) removed the endpoint: its
  `trl vllm-serve` runs vLLM's own server and VLLMClient.get_sequence_logprobs posts
  to /v1/completions with prompt_logprobs (trl/generation/vllm_client.py).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from examples.common.tiny_lm import tiny_llama

SPECIAL = ["[BOS]", "[UNK]", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = [
    "you",
    "are",
    "in",
    "a",
    "hall",
    "door",
    "to",
    "the",
    "north",
    "kitchen",
    "key",
    "on",
    "table",
    "take",
    "go",
    "open",
    "unlock",
    "kick",
    "it",
    "holding",
    "locked",
    "walk",
    "is",
    "and",
    "of",
    "with",
    "red",
    "blue",
    "green",
    "box",
    "lamp",
    "dark",
    "light",
    "room",
    "east",
    "west",
    "south",
    "up",
    "down",
    "look",
    "wait",
    "yes",
    "no",
    "agent",
    "task",
    "step",
    "memory",
    "hint",
    "ok",
    "done",
]
VOCAB_SIZE = 64
VOCAB = SPECIAL + WORDS + [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIAL) - len(WORDS))]
assert len(VOCAB) == VOCAB_SIZE, len(VOCAB)
BOS = 0


def write_tokenizer(path: Path) -> Path:
    """A WordLevel tokenizer.json: words split on whitespace and punctuation, unknown
    ones [UNK], and [BOS] first when special tokens are asked for."""
    vocab = {token: i for i, token in enumerate(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(SPECIAL)
    tokenizer.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", BOS)])
    tokenizer.save(str(path))
    return path


def chat_text(messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
    """The test model's chat template."""
    text = "[BOS] " + " ".join(f"<|{m['role']}|> {m['content']} <|end|>" for m in messages)
    return text + (" <|assistant|>" if add_generation_prompt else "")


class TinyLM:
    """A randomly initialised Llama: 64 tokens, 2 layers of width 32."""

    def __init__(self, seed: int = 0) -> None:
        # LlamaConfig's own special ids: no padding row
        self.model = tiny_llama(VOCAB_SIZE, seed, positions=1024, pad_token_id=None, eos_token_id=2).eval()
        self._lock = threading.Lock()

    def log_softmax(self, ids: Sequence[int]) -> torch.Tensor:
        """[len(ids), vocab]: row p is log π(· | ids[:p+1])."""
        with self._lock, torch.no_grad():
            logits = self.model(torch.tensor([list(ids)])).logits[0]
        return torch.log_softmax(logits, dim=-1)

    def token_logprobs(self, ids: Sequence[int], start: int) -> list[float]:
        """log π(ids[p] | ids[:p]) for p in start…len(ids)-1: what a teacher should return."""
        rows = self.log_softmax(ids)
        return [float(rows[p - 1, ids[p]]) for p in range(start, len(ids))]


def _ranked(row: torch.Tensor) -> list[tuple[int, float]]:
    order = torch.argsort(row, descending=True, stable=True).tolist()
    return [(int(i), float(row[i])) for i in order]


def _rank(row: torch.Tensor, token: int) -> int:
    return int((row > row[token]).sum()) + 1


def _vllm_position(row: torch.Tensor, token: int, k: int) -> dict[str, dict[str, Any]]:
    """vLLM's prompt_logprobs entry: the token itself, then the top k (k = -1: all)."""
    ranked = _ranked(row)
    chosen = ranked if k == -1 else ranked[:k]
    entries = {token: float(row[token])} | dict(chosen)
    return {
        str(t): {"logprob": max(lp, -9999.0), "rank": _rank(row, t), "decoded_token": VOCAB[t]}
        for t, lp in entries.items()
    }


@dataclass
class Behaviour:
    """What a server does besides answering: fail the first requests with these
    statuses, wait before answering, and remember every request."""

    fail: list[int] = field(default_factory=list)
    delay: float = 0.0
    answer: Any = None  # set: every scoring request is answered 200 with this instead
    requests: list[tuple[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def scoring_requests(self, path: str) -> list[Any]:
        return [body for p, body in self.requests if p == path]


Handler = Callable[[TinyLM, Tokenizer, dict[str, Any]], tuple[int, Any]]


def vllm_completions(lm: TinyLM, tok: Tokenizer, body: dict[str, Any]) -> tuple[int, Any]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        prompts = prompt
    elif isinstance(prompt, str):
        prompts = [tok.encode(prompt).ids]
    else:
        return 400, {
            "error": {"message": "Either prompt or prompt_embeds must be provided and non-empty.", "code": 400}
        }
    echo = bool(body.get("echo"))
    logprobs = body.get("logprobs")
    prompt_logprobs = body.get("prompt_logprobs")
    if prompt_logprobs is None and echo:
        prompt_logprobs = logprobs
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    max_tokens = body.get("max_tokens", 16)
    choices = []
    for index, ids in enumerate(prompts):
        rows = lm.log_softmax(ids)
        generated = [int(torch.argmax(rows[-1]))] if max_tokens else []
        positions: list[Any] | None = None
        if prompt_logprobs is not None:
            positions = [None] + [_vllm_position(rows[p - 1], ids[p], prompt_logprobs) for p in range(1, len(ids))]
        choice: dict[str, Any] = {
            "index": index,
            "text": " ".join(VOCAB[t] for t in (ids if echo else []) + generated),
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": positions,
        }
        if logprobs is not None:
            tokens = (list(ids) if echo else []) + generated
            steps = (positions or [None] * len(ids) if echo else []) + [
                _vllm_position(rows[-1], t, logprobs) for t in generated
            ]
            name = (lambda t: f"token_id:{t}") if as_ids else (lambda t: VOCAB[t])
            token_logprobs: list[float | None] = []
            tops: list[dict[str, float] | None] = []
            for t, entry in zip(tokens, steps, strict=True):
                if entry is None:
                    token_logprobs.append(None)
                    tops.append(None)
                    continue
                token_logprobs.append(entry[str(t)]["logprob"])
                # The token itself first, then by rank; the first logprobs + 1 kept.
                ordered = [(str(t), entry[str(t)])] + sorted(
                    ((k, v) for k, v in entry.items() if k != str(t)), key=lambda kv: kv[1]["rank"]
                )
                tops.append({name(int(k)): v["logprob"] for k, v in ordered[: logprobs + 1]})
            choice["logprobs"] = {
                "text_offset": list(range(len(tokens))),
                "token_logprobs": token_logprobs,
                "tokens": [name(t) for t in tokens],
                "top_logprobs": tops,
            }
        choices.append(choice)
    n = sum(len(p) for p in prompts)
    return 200, {
        "id": "cmpl-test",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model") or "tiny",
        "choices": choices,
        "usage": {"prompt_tokens": n, "completion_tokens": len(prompts), "total_tokens": n + len(prompts)},
    }


def vllm_tokenize(lm: TinyLM, tok: Tokenizer, body: dict[str, Any]) -> tuple[int, Any]:
    if "messages" in body:
        text = chat_text(body["messages"], add_generation_prompt=body.get("add_generation_prompt", True))
        ids = tok.encode(text, add_special_tokens=body.get("add_special_tokens", False)).ids
    else:
        ids = tok.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True)).ids
    return 200, {"count": len(ids), "max_model_len": 1024, "tokens": ids, "token_strs": None}


def sglang_generate(lm: TinyLM, tok: Tokenizer, body: dict[str, Any]) -> tuple[int, Any]:
    input_ids = body["input_ids"]
    batch = bool(input_ids) and isinstance(input_ids[0], list)
    sequences = input_ids if batch else [input_ids]

    def per(value: Any, i: int, default: Any) -> Any:
        if value is None:
            return default
        return value[i] if isinstance(value, list) else value

    outputs = []
    for i, ids in enumerate(sequences):
        start = per(body.get("logprob_start_len"), i, -1)
        k = per(body.get("top_logprobs_num"), i, 0)
        rows = lm.log_softmax(ids)
        meta: dict[str, Any] = {
            "id": f"req-{i}",
            "finish_reason": {"type": "length", "length": 0},
            "prompt_tokens": len(ids),
            "completion_tokens": 0,
            "cached_tokens": 0,
        }
        if body.get("return_logprob"):
            start = len(ids) - 1 if start == -1 else start
            # raw[j] = log π(ids[start+1+j]); the last raw row is the sampling one, popped.
            meta["input_token_logprobs"] = [[None, ids[start], None]] + [
                [float(rows[p - 1, ids[p]]), ids[p], None] for p in range(start + 1, len(ids))
            ]
            meta["output_token_logprobs"] = []
            if k > 0:
                meta["input_top_logprobs"] = [None] + [
                    [[lp, t, None] for t, lp in _ranked(rows[p - 1])[:k]] for p in range(start + 1, len(ids))
                ]
                meta["output_top_logprobs"] = []
        outputs.append({"text": "", "output_ids": [], "meta_info": meta})
    return 200, outputs if batch else outputs[0]


def trl_sequence_logprobs(lm: TinyLM, tok: Tokenizer, body: dict[str, Any]) -> tuple[int, Any]:
    sequences, lengths = body["sequences"], body["prompt_lengths"]
    if len(sequences) != len(lengths):
        return 500, "Internal Server Error"  # TRL raises ValueError, uncaught
    k = body.get("top_logprobs", 100)
    all_logprobs, all_ids = [], []
    for seq, pl in zip(sequences, lengths, strict=True):
        if pl < 0 or pl > len(seq):
            return 500, "Internal Server Error"
        rows = lm.log_softmax(seq)
        seq_logprobs, seq_ids = [], []
        for pos in range(pl, len(seq)):
            if pos == 0:  # vLLM has no log-prob for the first token
                seq_logprobs.append([])
                seq_ids.append([])
                continue
            entry = _vllm_position(rows[pos - 1], seq[pos], k)
            ranked = sorted(entry.items(), key=lambda kv: kv[1]["rank"])
            seq_ids.append([int(t) for t, _ in ranked])
            seq_logprobs.append([None if math.isnan(v["logprob"]) else v["logprob"] for _, v in ranked])
        all_logprobs.append(seq_logprobs)
        all_ids.append(seq_ids)
    empty = dict.fromkeys(
        ("logprobs_b64", "token_ids_b64", "actual_logprobs_b64", "actual_token_ids_b64", "shape", "completion_lengths")
    )
    return 200, {"logprobs": all_logprobs, "logprob_token_ids": all_ids, **empty}


ROUTES: dict[str, dict[str, Handler]] = {
    "vllm": {"/v1/completions": vllm_completions, "/tokenize": vllm_tokenize},
    "sglang": {"/generate": sglang_generate, "/tokenize": vllm_tokenize},
    "trl": {"/get_sequence_logprobs/": trl_sequence_logprobs},
}


@dataclass
class TeacherServer:
    url: str
    behaviour: Behaviour


@contextmanager
def serve(kind: str, lm: TinyLM, tokenizer_file: Path) -> Iterator[TeacherServer]:
    """One protocol's server on a free loopback port, in a thread."""
    routes = ROUTES[kind]
    tok = Tokenizer.from_file(str(tokenizer_file))
    behaviour = Behaviour()

    class Handle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            with behaviour.lock:
                behaviour.requests.append((self.path, body))
                behaviour.headers.append(dict(self.headers))
                status = behaviour.fail.pop(0) if behaviour.fail and self.path != "/tokenize" else None
            if behaviour.delay:
                time.sleep(behaviour.delay)
            handler = routes.get(self.path)
            if status is not None:
                answer: Any = {"error": {"message": f"injected {status}", "code": status}}
            elif behaviour.answer is not None and self.path != "/tokenize":
                status, answer = 200, behaviour.answer
            elif handler is None:
                status, answer = 404, {"detail": "Not Found"}
            else:
                status, answer = handler(lm, tok, body)
            data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if not isinstance(answer, str) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield TeacherServer(f"http://127.0.0.1:{server.server_address[1]}", behaviour)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
