"""Texts to the teacher's token ids: with a configured Hugging Face tokenizer.json
(`teacher.tokenizer_file`, loaded once per file version), else with the endpoint's
own POST /tokenize (vLLM's shape, which SGLang's follows: {model, prompt,
add_special_tokens} -> {tokens, count, max_model_len}; vLLM also takes {messages,
add_generation_prompt} and renders the chat template: vllm/entrypoints/serve/
tokenize/protocol.py, `TokenizeCompletionRequest`, `TokenizeChatRequest`).

Contexts are tokenized with the tokenizer's special tokens (a BOS where the model
has one), continuations without: a continuation goes after its context.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from domain.errors import BadGateway, Unavailable
from service.distill.teacher.endpoint import EndpointSession


class TextTokenizer(Protocol):
    vocab_size: int | None

    def encode(self, text: str, *, special: bool) -> list[int]: ...


class FileTokenizer:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.vocab_size: int | None = tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, special: bool) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=special).ids)


class EndpointTokenizer:
    """The endpoint's /tokenize, through the request's session (its retries and errors)."""

    vocab_size: int | None = None

    def __init__(self, session: EndpointSession, model: str | None) -> None:
        self.session = session
        self.model = model

    def encode(self, text: str, *, special: bool) -> list[int]:
        return self._tokens({"prompt": text, "add_special_tokens": special})

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The chat template's rendering, ending with the assistant's generation prompt."""
        return self._tokens({"messages": list(messages), "add_generation_prompt": True, "add_special_tokens": False})

    def _tokens(self, body: dict[str, Any]) -> list[int]:
        if self.model:
            body["model"] = self.model
        answer, _ = self.session.post("/tokenize", body, scoring=False)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise BadGateway(
                f"teacher endpoint {self.session.endpoint.shown}/tokenize answered without a list of token ids: "
                f"{str(answer)[:200]}",
                rule="teacher_bad_response",
            )
        return tokens


class TokenizerFiles:
    """Tokenizer files loaded once per (path, mtime), shared by the process's threads."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, int], FileTokenizer] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> FileTokenizer:
        try:
            key = (path, os.stat(path).st_mtime_ns)
            with self._lock:
                found = self._loaded.get(key)
                if found is None:
                    from tokenizers import Tokenizer  # only a server with a tokenizer file pays the import

                    found = FileTokenizer(Tokenizer.from_file(path))
                    self._loaded = {key: found} | {k: v for k, v in self._loaded.items() if k[0] != path}
        except Exception as exc:  # missing or malformed: the server's setting, not the request
            raise Unavailable(
                f"the tokenizer of server setting teacher.tokenizer_file ({path}) cannot be loaded: {exc}",
                field="settings.teacher.tokenizer_file",
                rule="tokenizer_file",
            ) from exc
        return found
