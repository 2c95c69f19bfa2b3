"""POST …/distill/teacher_logprobs against real HTTP teacher servers (see
teacher_servers.py for the shapes and the files they come from), each backed by
one tiny randomly initialised Llama: the log-probs Reflexa returns must be the
model's own log_softmax at the continuation's positions (within 1e-5), for every
protocol, batched or not, with top-k and entropies; contexts given inline (text,
chat messages rendered by the endpoint, token ids) or built from a stored step;
and every failure said plainly: endpoint down (502, naming it without its
credentials), slow (504), flaky (retried), refusing (502), not configured (503),
bad input (422 naming the field), a role without distill (403)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from migrations import upgrade
from service.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import step
from tests.fixtures import post_trajectory
from tests.service.distill.teacher.teacher_servers import TeacherServer, TinyLM, chat_text, serve, write_tokenizer

NS = "lab"
URL = f"/v1/namespaces/{NS}/distill/teacher_logprobs"
TOL = 1e-5
CONTEXT = "you are in a hall <|end|> <|user|> a door to the north"
CONTEXT_B = "a kitchen key on the table"


@pytest.fixture(scope="module")
def lm() -> TinyLM:
    return TinyLM(seed=0)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="module")
def tok(tokenizer_file: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_file))


@pytest.fixture(scope="module")
def servers(lm: TinyLM, tokenizer_file: Path) -> Iterator[dict[str, TeacherServer]]:
    with ExitStack() as stack:
        yield {kind: stack.enter_context(serve(kind, lm, tokenizer_file)) for kind in ("vllm", "sglang", "trl")}


@pytest.fixture(autouse=True)
def fresh(servers: dict[str, TeacherServer]) -> None:
    for server in servers.values():
        b = server.behaviour
        b.fail.clear()
        b.delay = 0.0
        b.answer = None
        b.requests.clear()
        b.headers.clear()


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'reflexa.db'}"
    upgrade(url)
    return url


@pytest.fixture
def make_api(db_url: str, tmp_path: Path) -> Any:
    @contextmanager
    def make(teacher: dict[str, Any] | None = None) -> Iterator[TestClient]:
        settings = make_settings(db_url, tmp_path, **({"teacher": teacher} if teacher is not None else {}))
        with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
            if api.get(f"/v1/namespaces/{NS}").status_code == 404:
                assert api.post("/v1/namespaces", json={"name": NS}).status_code == 201
            yield api

    return make


def teacher_settings(servers: dict[str, TeacherServer], kind: str, **overrides: Any) -> dict[str, Any]:
    base = {
        "vllm": {"protocol": "openai_completions", "model": "tiny"},
        "sglang": {"protocol": "sglang"},
        "trl": {"protocol": "trl_vllm"},
    }[kind]
    return {"base_url": servers[kind].url, "retry_backoff_seconds": 0.001, **base, **overrides}


def score(api: TestClient, status: int = 200, **body: Any) -> dict[str, Any]:
    r = api.post(URL, json=body)
    assert r.status_code == status, r.text
    return r.json()  # type: ignore[no-any-return]


def assert_close(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL, (got, want)


PROTOCOLS = [
    pytest.param("vllm", {"logprobs_mode": "prompt_logprobs"}, True, id="vllm-prompt_logprobs"),
    pytest.param("vllm", {"logprobs_mode": "echo"}, False, id="vllm-echo"),
    pytest.param("sglang", {"vocab_size": 64}, True, id="sglang"),
    pytest.param("trl", {}, True, id="trl_vllm"),
]


@pytest.mark.parametrize(("kind", "overrides", "entropy"), PROTOCOLS)
def test_scores_are_the_models_own_logprobs(
    make_api: Any,
    servers: dict[str, TeacherServer],
    tokenizer_file: Path,
    tok: Tokenizer,
    lm: TinyLM,
    kind: str,
    overrides: dict[str, Any],
    entropy: bool,
) -> None:
    """Three items in two batches (max_batch 2): text contexts with token-id and text
    continuations, and a token-id context; top-3 and (where the protocol has the
    whole distribution) entropies, all equal to the model's."""
    files = {"tokenizer_file": str(tokenizer_file)} if kind == "trl" else {}
    settings = teacher_settings(servers, kind, max_batch=2, **files, **overrides)
    prompt_b = tok.encode(CONTEXT_B).ids
    items = [
        {"id": "a", "context": {"text": CONTEXT}, "continuation": {"token_ids": [17, 9, 30, 41]}},
        {"id": "b", "context": {"token_ids": prompt_b}, "continuation": {"text": "take key open door"}},
        {"context": {"text": CONTEXT_B}, "continuation": {"token_ids": [5, 63, 0, 12, 12]}},
    ]
    with make_api(settings) as api:
        out = score(api, items=items, top_k=3, entropy=entropy)
    path = {"vllm": "/v1/completions", "sglang": "/generate", "trl": "/get_sequence_logprobs/"}[kind]
    assert len(servers[kind].behaviour.scoring_requests(path)) == 2
    assert out["endpoint"] == {
        "url": servers[kind].url,
        "protocol": settings["protocol"],
        "model": settings.get("model"),
    }
    assert out["timing"]["requests"] == 2 and out["timing"]["retries"] == 0
    assert [item["id"] for item in out["items"]] == ["a", "b", None]
    prompts = [tok.encode(CONTEXT).ids, prompt_b, prompt_b]
    continuations = [
        [17, 9, 30, 41],
        tok.encode("take key open door", add_special_tokens=False).ids,
        [5, 63, 0, 12, 12],
    ]
    for item, prompt, continuation in zip(out["items"], prompts, continuations, strict=True):
        assert item["token_ids"] == continuation
        assert item["prompt_tokens"] == len(prompt)
        ids = prompt + continuation
        assert_close(item["logprobs"], lm.token_logprobs(ids, len(prompt)))
        rows = lm.log_softmax(ids)
        for t, position in enumerate(range(len(prompt), len(ids))):
            row = rows[position - 1]
            values, indices = torch.topk(row, 3)
            top = item["top_k"][t]
            assert [e["token_id"] for e in top] == indices.tolist()
            assert_close([e["logprob"] for e in top], values.tolist())
            if entropy:
                assert abs(item["entropies"][t] - float(-(row.exp() * row).sum())) <= TOL
        if not entropy:
            assert item["entropies"] is None


def test_one_sequence_per_request_in_parallel(make_api: Any, servers: dict[str, TeacherServer], lm: TinyLM) -> None:
    """max_batch 1: one flat prompt per request, four in flight; answers stay aligned."""
    settings = teacher_settings(servers, "sglang", max_batch=1, max_concurrency=4)
    items = [
        {"context": {"token_ids": [0, 7 + i]}, "continuation": {"token_ids": [i + 1, 2 * i + 3]}} for i in range(6)
    ]
    with make_api(settings) as api:
        out = score(api, items=items)
    sent = servers["sglang"].behaviour.scoring_requests("/generate")
    assert len(sent) == 6 and all(isinstance(body["input_ids"][0], int) for body in sent)
    assert all(body["logprob_start_len"] == 1 for body in sent)  # one before the continuation
    for i, item in enumerate(out["items"]):
        assert_close(item["logprobs"], lm.token_logprobs([0, 7 + i, i + 1, 2 * i + 3], 2))


def test_messages_are_rendered_by_the_endpoints_chat_template(
    make_api: Any, servers: dict[str, TeacherServer], tok: Tokenizer, lm: TinyLM
) -> None:
    messages = [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "a dark room"}]
    with make_api(teacher_settings(servers, "vllm")) as api:
        out = score(api, items=[{"context": {"messages": messages}, "continuation": {"text": "look"}}])
    tokenized = servers["vllm"].behaviour.scoring_requests("/tokenize")
    assert {
        "messages": messages,
        "add_generation_prompt": True,
        "add_special_tokens": False,
        "model": "tiny",
    } in tokenized
    prompt = tok.encode(chat_text(messages, add_generation_prompt=True), add_special_tokens=False).ids
    continuation = tok.encode("look", add_special_tokens=False).ids
    assert out["items"][0]["prompt_tokens"] == len(prompt)
    assert_close(out["items"][0]["logprobs"], lm.token_logprobs(prompt + continuation, len(prompt)))


def test_a_referenced_context_is_built_as_distill_contexts_builds_it(
    make_api: Any, servers: dict[str, TeacherServer], tok: Tokenizer, lm: TinyLM
) -> None:
    with make_api(teacher_settings(servers, "vllm")) as api:
        steps = [step("you are in a hall", "go north", result="a kitchen"), step("a kitchen key", "take key")]
        post_trajectory(api, NS, "t-ref", task="open the door", steps=steps, success=True)
        teachers = [{"kind": "hindsight", "horizon": 1}]
        built = api.post(
            f"/v1/namespaces/{NS}/distill/contexts", json={"trajectories": [{"id": "t-ref"}], "teachers": teachers}
        )
        assert built.status_code == 200, built.text
        contexts = built.json()["trajectories"][0]["steps"]
        refs = [
            {"trajectory_id": "t-ref", "step": 0, "teacher": "hindsight@1"},
            {"trajectory_id": "t-ref", "step": 1},  # the plain context
            {"trajectory_id": "t-ref", "step": 0, "teacher": "hindsight@1", "rendering": "messages"},
        ]
        items = [{"ref": ref, "continuation": {"token_ids": [20, 21]}} for ref in refs]
        out = score(api, items=items, contexts={"teachers": teachers})

        texts = [contexts[0]["teachers"]["hindsight@1"]["text"], contexts[1]["plain"]["text"]]
        for item, text in zip(out["items"][:2], texts, strict=True):
            prompt = tok.encode(text).ids
            assert_close(item["logprobs"], lm.token_logprobs(prompt + [20, 21], len(prompt)))
        messages = contexts[0]["teachers"]["hindsight@1"]["messages"]
        prompt = tok.encode(chat_text(messages, add_generation_prompt=True), add_special_tokens=False).ids
        assert_close(out["items"][2]["logprobs"], lm.token_logprobs(prompt + [20, 21], len(prompt)))
        used = out["items"][0]["context"]
        assert used["teacher"] == "hindsight@1" and used["applicable"] and used["template_version"]
        assert out["items"][1]["context"]["teacher"] is None

        unknown = score(api, 422, items=[{"ref": {**refs[0], "teacher": "memory"}, "continuation": {"token_ids": [1]}}])
        assert unknown["error"]["field"] == "items[0].ref.teacher"
        missing = {"ref": {"trajectory_id": "t-ref", "step": 9}, "continuation": {"token_ids": [1]}}
        assert score(api, 404, items=[missing])["error"]["field"] == "items[0].ref.step"
        # DistillService's own errors name this request's fields.
        nowhere = {"ref": {"trajectory_id": "nowhere", "step": 0}, "continuation": {"token_ids": [1]}}
        assert score(api, 404, items=[items[1], nowhere])["error"]["field"] == "items[1].ref.trajectory_id"
        bad_spec = {"teachers": [{"kind": "hindsight", "k": 3}]}
        assert score(api, 422, items=items[1:2], contexts=bad_spec)["error"]["field"] == "contexts.teachers[0].k"


def test_messages_need_a_protocol_with_a_chat_template(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    messages = [{"role": "user", "content": "hello"}]
    with make_api(teacher_settings(servers, "sglang")) as api:
        out = score(api, 422, items=[{"context": {"messages": messages}, "continuation": {"token_ids": [1]}}])
    assert (out["error"]["field"], out["error"]["rule"]) == ("items[0].context.messages", "needs_chat_template")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ITEM = {"context": {"token_ids": [0, 5, 6]}, "continuation": {"token_ids": [7, 8]}}


def test_an_endpoint_that_is_down_is_a_502_naming_it_without_credentials(make_api: Any) -> None:
    port = free_port()
    settings = {"base_url": f"http://trainer:s3cret@127.0.0.1:{port}/v1", "protocol": "sglang", "max_retries": 2}
    with make_api({**settings, "retry_backoff_seconds": 0.001}) as api:
        out = score(api, 502, items=[ITEM])
    error = out["error"]
    assert (error["type"], error["rule"]) == ("bad_gateway", "teacher_unavailable")
    assert f"http://127.0.0.1:{port}/generate" in error["message"] and "3 attempts" in error["message"]
    assert "s3cret" not in error["message"] and "trainer" not in error["message"]


def test_a_slow_endpoint_is_a_504(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    servers["trl"].behaviour.delay = 0.6
    with make_api(teacher_settings(servers, "trl", timeout_seconds=0.1)) as api:
        out = score(api, 504, items=[ITEM])
    assert (out["error"]["type"], out["error"]["rule"]) == ("gateway_timeout", "teacher_timeout")
    assert servers["trl"].url in out["error"]["message"]
    assert len(servers["trl"].behaviour.requests) == 1  # a timeout is not retried


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_transient_failure_is_retried(
    make_api: Any, servers: dict[str, TeacherServer], lm: TinyLM, status: int
) -> None:
    servers["vllm"].behaviour.fail.extend([status])
    with make_api(teacher_settings(servers, "vllm")) as api:
        out = score(api, items=[ITEM])
    assert len(servers["vllm"].behaviour.scoring_requests("/v1/completions")) == 2
    assert out["timing"]["retries"] == 1
    assert_close(out["items"][0]["logprobs"], lm.token_logprobs([0, 5, 6, 7, 8], 3))


def test_retries_are_bounded_then_502(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    servers["vllm"].behaviour.fail.extend([500, 502, 500, 500])
    with make_api(teacher_settings(servers, "vllm", max_retries=2)) as api:
        out = score(api, 502, items=[ITEM])
    assert out["error"]["rule"] == "teacher_unavailable" and "injected 500" in out["error"]["message"]
    assert len(servers["vllm"].behaviour.scoring_requests("/v1/completions")) == 3


def test_a_refusal_is_a_502_with_the_endpoints_words_not_retried(
    make_api: Any, servers: dict[str, TeacherServer]
) -> None:
    servers["vllm"].behaviour.fail.extend([400])
    with make_api(teacher_settings(servers, "vllm")) as api:
        out = score(api, 502, items=[ITEM])
    assert out["error"]["rule"] == "teacher_refused" and "injected 400" in out["error"]["message"]
    assert len(servers["vllm"].behaviour.requests) == 1


def test_the_wrong_protocol_is_a_502_naming_the_path(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    with make_api({**teacher_settings(servers, "vllm"), "protocol": "trl_vllm"}) as api:
        out = score(api, 502, items=[ITEM])
    assert f"{servers['vllm'].url}/get_sequence_logprobs/ refused the request (404)" in out["error"]["message"]


def test_an_answer_in_another_shape_is_a_502(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    servers["vllm"].behaviour.answer = {"choices": []}
    with make_api(teacher_settings(servers, "vllm")) as api:
        out = score(api, 502, items=[ITEM])
    assert out["error"]["rule"] == "teacher_bad_response" and "0 choices for 1 prompts" in out["error"]["message"]


def test_a_truncated_distribution_is_no_entropy(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    """vocab_size 4 asks SGLang for 4 tokens' log-probs: not the whole distribution."""
    small = {"context": {"token_ids": [0, 1, 2]}, "continuation": {"token_ids": [3]}}
    with make_api(teacher_settings(servers, "sglang", vocab_size=4)) as api:
        out = score(api, 502, items=[small], entropy=True)
    assert out["error"]["rule"] == "teacher_bad_response" and "of the probability" in out["error"]["message"]


def test_the_api_key_is_sent_as_a_bearer_token(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    with make_api(teacher_settings(servers, "sglang", api_key="tk-123")) as api:
        score(api, items=[ITEM])
    assert servers["sglang"].behaviour.headers[0]["Authorization"] == "Bearer tk-123"


def test_no_teacher_configured_is_a_503_naming_the_setting(make_api: Any) -> None:
    with make_api() as api:
        out = score(api, 503, items=[ITEM])
    assert (out["error"]["field"], out["error"]["rule"]) == ("settings.teacher.base_url", "teacher_not_configured")
    assert "REFLEXA_TEACHER__BASE_URL" in out["error"]["message"]


BAD = [
    pytest.param(
        {"items": [{"context": {"text": "a"}, "continuation": {"token_ids": []}}]},
        "items[0].continuation.token_ids",
        id="empty",
    ),
    pytest.param(
        {"items": [{"context": {"text": "a"}, "continuation": {"token_ids": [1], "text": "a"}}]},
        "items[0].continuation",
        id="ids-and-text",
    ),
    pytest.param({"items": [{"context": {"text": "a"}, "continuation": {}}]}, "items[0].continuation", id="neither"),
    pytest.param(
        {
            "items": [
                {"context": {"text": "a"}, "ref": {"trajectory_id": "t", "step": 0}, "continuation": {"token_ids": [1]}}
            ]
        },
        "items[0]",
        id="context-and-ref",
    ),
    pytest.param(
        {"items": [{"context": {"text": "a"}, "continuation": {"token_ids": [1, 64]}}]},
        "items[0].continuation.token_ids[1]",
        id="out-of-vocab",
    ),
    pytest.param(
        {"items": [{"context": {"token_ids": [0, 99]}, "continuation": {"token_ids": [1]}}]},
        "items[0].context.token_ids[1]",
        id="context-out-of-vocab",
    ),
    pytest.param(
        {"items": [{"context": {"text": "a"}, "continuation": {"text": "   "}}]},
        "items[0].continuation.text",
        id="tokenizes-to-nothing",
    ),
    pytest.param(
        {"items": [{"context": {"text": "a"}, "continuation": {"token_ids": [-1]}}]},
        "items[0].continuation.token_ids[0]",
        id="negative",
    ),
    pytest.param({"items": []}, "items", id="no-items"),
]


@pytest.mark.parametrize(("body", "field"), BAD)
def test_bad_input_is_a_422_naming_the_field(
    make_api: Any, servers: dict[str, TeacherServer], tokenizer_file: Path, body: dict[str, Any], field: str
) -> None:
    with make_api(teacher_settings(servers, "vllm", tokenizer_file=str(tokenizer_file))) as api:
        out = score(api, 422, **body)
    assert out["error"]["field"] == field, out
    assert not servers["vllm"].behaviour.scoring_requests("/v1/completions")


def test_what_the_protocol_cannot_do_is_a_422(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    text_item = {"context": {"text": "a"}, "continuation": {"token_ids": [1]}}
    with make_api(teacher_settings(servers, "trl")) as api:  # no tokenizer file, no /tokenize
        out = score(api, 422, items=[text_item])
        assert (out["error"]["field"], out["error"]["rule"]) == ("items[0].context.text", "needs_tokenizer")
        out = score(api, 422, items=[ITEM], entropy=True)  # no vocabulary size known
        assert (out["error"]["field"], out["error"]["rule"]) == ("entropy", "not_supported_by_teacher")
    with make_api(teacher_settings(servers, "vllm", logprobs_mode="echo")) as api:
        assert score(api, 422, items=[ITEM], entropy=True)["error"]["field"] == "entropy"


def test_a_role_without_distill_is_refused(make_api: Any, servers: dict[str, TeacherServer]) -> None:
    with make_api(teacher_settings(servers, "vllm")) as api:
        made = api.post("/v1/keys", json={"role": "agent", "namespaces": [NS]})
        assert made.status_code == 201, made.text
        r = api.post(URL, json={"items": [ITEM]}, headers={"Authorization": f"Bearer {made.json()['key']}"})
        assert r.status_code == 403, r.text
        assert api.post("/v1/namespaces/nowhere/distill/teacher_logprobs", json={"items": [ITEM]}).status_code == 404
