"""The three ways a teacher server scores given tokens, one small class each: build
the request for a batch of (prompt ids, continuation ids), and read the
continuation's per-token log-probs (and top-k, and the whole distribution for the
entropy, where asked) out of the answer.

Every protocol scores prompt + continuation as one sequence and reads the
log-probs at the continuation's positions: log π(c_t | prompt, c_<t). Sources of
each shape (checked against these files; the test servers cite them too):

- openai_completions, vLLM's /v1/completions: vllm/entrypoints/openai/completion/
  protocol.py (`CompletionRequest.prompt` takes token ids or lists of them;
  `prompt_logprobs`; `echo` with `logprobs`; `CompletionResponseChoice.prompt_logprobs`:
  per position None or {token_id: {logprob, rank, decoded_token}}) and serving.py
  (`request_output_to_completion_response`, `_create_completion_logprobs`), vLLM
  commits 002032ee / 030ea52e. TRL 1.16's `VLLMClient.get_sequence_logprobs`
  (trl/generation/vllm_client.py) sends exactly this (`max_tokens` 1,
  `prompt_logprobs` k) since its `trl vllm-serve` runs vLLM's own server.
- sglang, SGLang's /generate: python/sglang/srt/managers/io_struct.py
  (`GenerateReqInput`: input_ids, return_logprob, logprob_start_len,
  top_logprobs_num, return_text_in_logprobs), scheduler_output_processor_mixin.py
  (`input_token_logprobs_val = [None] + …[:-1]`: the entry at logprob_start_len is
  always None) and tokenizer_manager.py (`detokenize_logprob_tokens`: entries are
  (logprob, token_id, text|None)).
- trl_vllm, the /get_sequence_logprobs/ endpoint of TRL's own `trl vllm-serve`
  (trl/scripts/vllm_serve.py, huggingface/trl f2cd5771; from v1.1.0, gone in 1.16):
  `SequenceLogprobsRequest` {sequences, prompt_lengths, top_logprobs, temperature,
  response_format}, JSON answer {logprobs, logprob_token_ids} per completion
  position, sorted by rank, the actual token always among them (vLLM's
  prompt_logprobs includes it), NaN sent as null.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from service.settings import TeacherSettings

FULL_MASS = 0.99  # a "whole distribution" must carry at least this probability


class ProtocolError(Exception):
    """The endpoint's 2xx answer is not what the protocol promises."""


@dataclass(frozen=True)
class Scored:
    """One sequence to score: the context's token ids, then the continuation's."""

    prompt: Sequence[int]
    continuation: Sequence[int]


@dataclass(frozen=True)
class Want:
    top_k: int = 0
    entropy: bool = False
    vocab_size: int | None = None  # what "the whole distribution" means where it must be asked by size


@dataclass(frozen=True)
class Top:
    token_id: int | None
    logprob: float
    token: str | None = None


@dataclass
class Scores:
    logprobs: list[float]
    top_k: list[list[Top]] | None = None
    entropies: list[float] | None = None


class TeacherProtocol(ABC):
    name: ClassVar[str]
    path: ClassVar[str]
    #: POST /tokenize in vLLM's shape ({prompt, add_special_tokens} -> {tokens}).
    tokenizes: ClassVar[bool] = False
    #: …and with {messages, add_generation_prompt}: the endpoint's chat template.
    chat_template: ClassVar[bool] = False

    def __init__(self, settings: TeacherSettings) -> None:
        self.model = settings.model

    def unsupported(self, want: Want) -> str | None:
        """Why this protocol cannot give what is wanted (None: it can)."""
        if want.entropy and want.vocab_size is None:
            return "the entropy needs the teacher's vocabulary size: set teacher.vocab_size or teacher.tokenizer_file"
        return None

    @abstractmethod
    def request(self, batch: Sequence[Scored], want: Want) -> dict[str, Any]: ...

    @abstractmethod
    def parse(self, body: Any, batch: Sequence[Scored], want: Want) -> list[Scores]: ...


class OpenAICompletions(TeacherProtocol):
    """POST /v1/completions, the prompt as token ids. `prompt_logprobs` (vLLM):
    `max_tokens` 1 and `prompt_logprobs` k (-1: the whole vocabulary), read from
    choice.prompt_logprobs; `echo` (the OpenAI API): `echo` with `logprobs`, read
    from choice.logprobs.token_logprobs over the echoed prompt."""

    name = "openai_completions"
    path = "/v1/completions"
    tokenizes = True
    chat_template = True

    def __init__(self, settings: TeacherSettings) -> None:
        super().__init__(settings)
        self.mode = settings.logprobs_mode

    def unsupported(self, want: Want) -> str | None:
        if want.entropy and self.mode == "echo":
            return "the entropy needs the whole distribution, which echo mode cannot ask for: use prompt_logprobs"
        return None  # prompt_logprobs -1 is the whole vocabulary, whatever its size

    def request(self, batch: Sequence[Scored], want: Want) -> dict[str, Any]:
        prompts = [[*s.prompt, *s.continuation] for s in batch]
        body: dict[str, Any] = {"prompt": prompts[0] if len(prompts) == 1 else prompts, "max_tokens": 1}
        if self.model:
            body["model"] = self.model
        if self.mode == "prompt_logprobs":
            body["prompt_logprobs"] = -1 if want.entropy else want.top_k
        else:
            body.update(echo=True, logprobs=want.top_k)
            if want.top_k:
                body["return_tokens_as_token_ids"] = True  # vLLM: top-k keys "token_id:N"; others ignore it
        return body

    def parse(self, body: Any, batch: Sequence[Scored], want: Want) -> list[Scores]:
        choices = _get(body, "choices", list)
        if len(choices) != len(batch):
            raise ProtocolError(f"{len(choices)} choices for {len(batch)} prompts")
        if all(isinstance(c, dict) and isinstance(c.get("index"), int) for c in choices):
            choices = sorted(choices, key=lambda c: c["index"])
        read = self._prompt_logprobs if self.mode == "prompt_logprobs" else self._echo
        return [read(choice, s, want) for choice, s in zip(choices, batch, strict=True)]

    @staticmethod
    def _prompt_logprobs(choice: Any, s: Scored, want: Want) -> Scores:
        positions = _get(choice, "prompt_logprobs", list)
        start, n = len(s.prompt), len(s.continuation)
        if len(positions) != start + n:
            raise ProtocolError(f"prompt_logprobs has {len(positions)} positions for a sequence of {start + n} tokens")
        out = Scores([], [] if want.top_k else None, [] if want.entropy else None)
        for t, token in enumerate(s.continuation):
            entry = positions[start + t]
            if not isinstance(entry, Mapping):
                raise ProtocolError(f"prompt_logprobs[{start + t}] is {entry!r}, not a mapping")
            by_id = {int(k): v for k, v in entry.items()}
            if token not in by_id:
                raise ProtocolError(f"prompt_logprobs[{start + t}] lacks the token {token} itself")
            out.logprobs.append(_number(by_id[token], "logprob"))
            if out.top_k is not None:
                ranked = sorted(by_id.items(), key=lambda kv: _number(kv[1], "rank"))
                out.top_k.append([Top(k, _number(v, "logprob")) for k, v in ranked if _number(v, "rank") <= want.top_k])
            if out.entropies is not None:
                out.entropies.append(_entropy([_number(v, "logprob") for v in by_id.values()]))
        return out

    @staticmethod
    def _echo(choice: Any, s: Scored, want: Want) -> Scores:
        logprobs = _get(choice, "logprobs", dict)
        values = _get(logprobs, "token_logprobs", list)
        start, n = len(s.prompt), len(s.continuation)
        if len(values) < start + n:  # the echoed prompt, then what was generated (max_tokens 1)
            raise ProtocolError(f"token_logprobs has {len(values)} entries for an echoed prompt of {start + n}")
        out = Scores([_float(values[start + t], f"token_logprobs[{start + t}]") for t in range(n)])
        if want.top_k:
            tops = _get(logprobs, "top_logprobs", list)
            if len(tops) < start + n:
                raise ProtocolError(f"top_logprobs has {len(tops)} entries for an echoed prompt of {start + n}")
            out.top_k = []
            for t in range(n):
                entry = tops[start + t]
                if not isinstance(entry, Mapping):
                    raise ProtocolError(f"top_logprobs[{start + t}] is {entry!r}, not a mapping")
                ranked = sorted(entry.items(), key=lambda kv: -_float(kv[1], "top_logprobs"))[: want.top_k]
                out.top_k.append([_top_from_text(k, _float(v, "top_logprobs")) for k, v in ranked])
        return out


class SGLangGenerate(TeacherProtocol):
    """POST /generate with input_ids, `max_new_tokens` 0 (prefill only) and
    `logprob_start_len` one before the continuation: SGLang leaves the entry at the
    start position None, so the continuation's log-probs are entries 1…n."""

    name = "sglang"
    path = "/generate"
    tokenizes = True

    def request(self, batch: Sequence[Scored], want: Want) -> dict[str, Any]:
        one = len(batch) == 1
        ids = [[*s.prompt, *s.continuation] for s in batch]
        starts = [len(s.prompt) - 1 for s in batch]
        body: dict[str, Any] = {
            "input_ids": ids[0] if one else ids,
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": starts[0] if one else starts,
            "return_text_in_logprobs": False,
        }
        k = want.vocab_size if want.entropy else want.top_k
        if k:
            body["top_logprobs_num"] = k
        return body

    def parse(self, body: Any, batch: Sequence[Scored], want: Want) -> list[Scores]:
        outputs = body if isinstance(body, list) else [body]
        if len(outputs) != len(batch):
            raise ProtocolError(f"{len(outputs)} outputs for {len(batch)} sequences")
        return [self._one(output, s, want) for output, s in zip(outputs, batch, strict=True)]

    @staticmethod
    def _one(output: Any, s: Scored, want: Want) -> Scores:
        meta = _get(output, "meta_info", dict)
        entries = _get(meta, "input_token_logprobs", list)
        n = len(s.continuation)
        if len(entries) != n + 1:
            raise ProtocolError(f"input_token_logprobs has {len(entries)} entries; expected {n + 1} from the start")
        out = Scores([], [] if want.top_k else None, [] if want.entropy else None)
        tops = _get(meta, "input_top_logprobs", list) if (want.top_k or want.entropy) else []
        if tops and len(tops) != n + 1:
            raise ProtocolError(f"input_top_logprobs has {len(tops)} entries; expected {n + 1}")
        for t, token in enumerate(s.continuation):
            logprob, token_id = _triple(entries[t + 1], f"input_token_logprobs[{t + 1}]")
            if token_id != token:
                raise ProtocolError(f"input_token_logprobs[{t + 1}] is for token {token_id}, not {token}")
            out.logprobs.append(logprob)
            if want.top_k or want.entropy:
                row = tops[t + 1]
                if not isinstance(row, list):
                    raise ProtocolError(f"input_top_logprobs[{t + 1}] is {row!r}, not a list")
                pairs = [_triple(e, f"input_top_logprobs[{t + 1}]") for e in row]
                pairs.sort(key=lambda p: -p[0])
                if out.top_k is not None:
                    out.top_k.append([Top(i, lp) for lp, i in pairs[: want.top_k]])
                if out.entropies is not None:
                    out.entropies.append(_entropy([lp for lp, _ in pairs]))
        return out


class TRLSequenceLogprobs(TeacherProtocol):
    """POST /get_sequence_logprobs/ of `trl vllm-serve` (TRL 1.1–1.15): whole
    sequences and prompt lengths; per completion position the ranked logprobs and
    their token ids, among them the actual token's."""

    name = "trl_vllm"
    path = "/get_sequence_logprobs/"

    def request(self, batch: Sequence[Scored], want: Want) -> dict[str, Any]:
        return {
            "sequences": [[*s.prompt, *s.continuation] for s in batch],
            "prompt_lengths": [len(s.prompt) for s in batch],
            "top_logprobs": want.vocab_size if want.entropy else want.top_k,
            "temperature": 1.0,
            "response_format": "json",
        }

    def parse(self, body: Any, batch: Sequence[Scored], want: Want) -> list[Scores]:
        logprobs = _get(body, "logprobs", list)
        token_ids = _get(body, "logprob_token_ids", list)
        if len(logprobs) != len(batch) or len(token_ids) != len(batch):
            raise ProtocolError(f"{len(logprobs)} sequences of logprobs for {len(batch)} sent")
        out = []
        for i, s in enumerate(batch):
            rows, ids = logprobs[i], token_ids[i]
            if not isinstance(rows, list) or not isinstance(ids, list) or len(rows) != len(s.continuation):
                raise ProtocolError(f"sequence {i}: logprobs for {len(rows)} positions, not {len(s.continuation)}")
            scores = Scores([], [] if want.top_k else None, [] if want.entropy else None)
            for t, token in enumerate(s.continuation):
                if not isinstance(rows[t], list) or not isinstance(ids[t], list) or len(rows[t]) != len(ids[t]):
                    raise ProtocolError(f"sequence {i}, position {t}: logprobs and token ids differ in shape")
                pairs = [(_float(lp, "logprobs"), int(tid)) for lp, tid in zip(rows[t], ids[t], strict=True)]
                actual = [lp for lp, tid in pairs if tid == token]
                if not actual:
                    raise ProtocolError(f"sequence {i}, position {t}: the token {token} itself is missing")
                scores.logprobs.append(actual[0])
                if scores.top_k is not None:
                    scores.top_k.append([Top(tid, lp) for lp, tid in pairs[: want.top_k]])
                if scores.entropies is not None:
                    scores.entropies.append(_entropy([lp for lp, _ in pairs]))
            out.append(scores)
        return out


PROTOCOLS: dict[str, type[TeacherProtocol]] = {
    p.name: p for p in (OpenAICompletions, SGLangGenerate, TRLSequenceLogprobs)
}


def build_protocol(settings: TeacherSettings) -> TeacherProtocol:
    return PROTOCOLS[settings.protocol](settings)


# -- reading answers -----------------------------------------------------------------


def _get(body: Any, key: str, kind: type) -> Any:
    value = body.get(key) if isinstance(body, Mapping) else None
    if not isinstance(value, kind):
        raise ProtocolError(
            f"`{key}` is {type(value).__name__ if value is not None else 'missing'}, not {kind.__name__}"
        )
    return value


def _float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ProtocolError(f"{what} holds {value!r}, not a log-prob")
    return float(value)


def _number(entry: Any, key: str) -> float:
    if not isinstance(entry, Mapping):
        raise ProtocolError(f"a prompt_logprobs entry is {entry!r}, not a mapping")
    return _float(entry.get(key), key)


def _triple(entry: Any, what: str) -> tuple[float, int]:
    if not isinstance(entry, list | tuple) or len(entry) < 2 or not isinstance(entry[1], int):
        raise ProtocolError(f"{what} is {entry!r}, not [logprob, token_id, text]")
    return _float(entry[0], what), entry[1]


def _top_from_text(key: str, logprob: float) -> Top:
    """An echo-mode top-k key: vLLM's "token_id:N" (return_tokens_as_token_ids), else the token's text."""
    if key.startswith("token_id:") and key[len("token_id:") :].isdigit():
        return Top(int(key[len("token_id:") :]), logprob)
    return Top(None, logprob, token=key)


def _entropy(logprobs: Sequence[float]) -> float:
    mass = sum(math.exp(lp) for lp in logprobs)
    if mass < FULL_MASS:
        raise ProtocolError(
            f"the distribution returned holds {mass:.3f} of the probability: the endpoint capped it "
            "(vLLM: start it with --max-logprobs -1; SGLang and TRL: check teacher.vocab_size)"
        )
    return -sum(math.exp(lp) * lp for lp in logprobs if lp > -math.inf)
