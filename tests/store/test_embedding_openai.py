"""The OpenAI-compatible backend against a real HTTP server in the test process that
speaks POST /v1/embeddings: batching, ordering, normalisation, retries through the
openai client, and clear errors for what a server gets wrong."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from store.embedding import CachedEmbedder, EmbeddingError, EmbeddingUnavailable, build_embedder
from store.embedding.openai_compat import OpenAICompatEmbedder

DIM = 4


def scripted_vector(text: str) -> list[float]:
    """A deterministic, deliberately unnormalised vector for `text`."""
    return [float(len(text)), 1.0, float(sum(map(ord, text)) % 7), 2.0]


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass
class EmbeddingServer:
    """Answers each request with the next scripted Reply, or, when the script is
    empty, with `scripted_vector` of each input, items in reverse order (the
    `index` field, not the position, says which input a vector belongs to)."""

    base_url: str = ""
    script: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def reply(self, request: dict[str, Any]) -> Reply:
        if self.script:
            return self.script.pop(0)
        items = [
            {"object": "embedding", "index": i, "embedding": scripted_vector(t)} for i, t in enumerate(request["input"])
        ]
        return Reply(200, {"object": "list", "data": items[::-1], "model": request["model"], "usage": {}})


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    state = EmbeddingServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            assert self.path == "/v1/embeddings"
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(request)
            state.headers.append({name.lower(): value for name, value in self.headers.items()})
            reply = state.reply(request)
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            """Keep the test output quiet."""

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def embedder(server: EmbeddingServer, **overrides: Any) -> OpenAICompatEmbedder:
    options: dict[str, Any] = {"base_url": server.base_url, "model": "embed-small", "dim": DIM, "api_key": "sk-test"}
    return OpenAICompatEmbedder(**(options | overrides))


def expected(texts: list[str]) -> np.ndarray:
    raw = np.array([scripted_vector(text) for text in texts], dtype=np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_vectors_come_back_normalised_in_input_order_in_batches(server: EmbeddingServer) -> None:
    texts = ["door", "locked door", "key", "a long corridor", "ok"]
    vectors = embedder(server, batch_size=2).encode(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (5, DIM)
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)
    assert [request["input"] for request in server.requests] == [
        ["door", "locked door"],
        ["key", "a long corridor"],
        ["ok"],
    ]
    assert server.requests[0]["model"] == "embed-small"
    assert server.requests[0]["encoding_format"] == "float"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_empty_input_sends_no_request(server: EmbeddingServer) -> None:
    assert embedder(server).encode([]).shape == (0, DIM)
    assert server.requests == []


def test_a_429_is_retried_by_the_client_then_succeeds(server: EmbeddingServer) -> None:
    server.script.append(Reply(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "10"}))
    vectors = embedder(server, max_retries=2).encode(["door"])
    np.testing.assert_allclose(vectors, expected(["door"]), atol=1e-6)
    assert len(server.requests) == 2


def test_rate_limited_past_the_retries_is_unavailable(server: EmbeddingServer) -> None:
    server.script.extend([Reply(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "10"})] * 2)
    with pytest.raises(EmbeddingUnavailable, match="unavailable"):
        embedder(server, max_retries=1).encode(["door"])
    assert len(server.requests) == 2


def test_a_refused_request_is_a_permanent_error(server: EmbeddingServer) -> None:
    server.script.append(Reply(400, {"error": {"message": "model not found"}}))
    with pytest.raises(EmbeddingError, match="refused the request") as raised:
        embedder(server).encode(["door"])
    assert not isinstance(raised.value, EmbeddingUnavailable)


def test_an_unreachable_endpoint_is_unavailable() -> None:
    unreachable = OpenAICompatEmbedder(base_url="http://127.0.0.1:9/v1", model="m", dim=DIM, max_retries=0, timeout=2)
    with pytest.raises(EmbeddingUnavailable):
        unreachable.encode(["door"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"object": "list"}, "expected a `data` list of 2 embeddings, got NoneType"),
        ({"data": "oops"}, "expected a `data` list of 2 embeddings, got str"),
        ({"data": [{"index": 0, "embedding": [1, 2, 3, 4]}]}, "expected a `data` list of 2 embeddings, got 1"),
        (
            {"data": [{"index": 0, "embedding": [1, 2, 3, 4]}, {"index": 1, "embedding": [1, 2, 3]}]},
            "item 1 has an embedding of 3, not 4 floats",
        ),
        (
            {"data": [{"index": 0, "embedding": [1, 2, 3, 4]}, {"index": 0, "embedding": [1, 2, 3, 4]}]},
            "item 1 has index 0",
        ),
        (
            {"data": [{"index": 0, "embedding": [1, 2, 3, 4]}, {"index": 1, "embedding": "AAAA"}]},
            "item 1 has an embedding of str",
        ),
        (
            {"data": [{"index": 0, "embedding": [1, 2, 3, 4]}, {"index": 1, "embedding": [1, "x", 3, 4]}]},
            "item 1 has non-numeric values",
        ),
        (b"<html>502 bad gateway</html>", "answered with invalid JSON"),
    ],
    ids=["no-data", "data-not-a-list", "too-few", "wrong-dim", "duplicate-index", "base64", "non-numeric", "not-json"],
)
def test_a_malformed_response_raises_a_clear_error(server: EmbeddingServer, body: Any, message: str) -> None:
    server.script.append(Reply(200, body))
    with pytest.raises(EmbeddingError, match=message) as raised:
        embedder(server).encode(["door", "key"])
    assert server.base_url in str(raised.value)


def test_a_non_json_page_is_an_error_not_vectors(server: EmbeddingServer) -> None:
    server.script.append(Reply(200, b"<html>502 bad gateway</html>", content_type="text/html"))
    with pytest.raises(EmbeddingError, match=server.base_url):
        embedder(server).encode(["door", "key"])


def test_build_embedder_makes_a_cached_openai_embedder(server: EmbeddingServer, tmp_path: Path) -> None:
    built = build_embedder(
        "openai",
        cache_dir=tmp_path,
        openai_base_url=server.base_url,
        openai_model="embed-small",
        openai_dim=DIM,
        openai_api_key=None,
    )
    assert isinstance(built, CachedEmbedder) and built.name == "embed-small" and built.dim == DIM
    built.encode(["door", "key"])
    built.encode(["key", "door"])
    assert len(server.requests) == 1 and built.hits == 2
