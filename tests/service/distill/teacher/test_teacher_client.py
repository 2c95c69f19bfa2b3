"""`Client.teacher_logprobs` and `AsyncClient.teacher_logprobs` against a real
Reflexa server (uvicorn, configured through REFLEXA_TEACHER__… environment
variables) whose teacher is the vLLM-shaped test server over the tiny Llama:
inline contexts (text, token ids, a context read from distill_contexts), contexts
the server builds by reference, input refused before a round trip, and a failing
teacher raised as Unavailable naming the rule, without the client retrying it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reflexa import AsyncClient, Client, errors
from tokenizers import Tokenizer

from migrations import upgrade
from tests.conftest import LiveServer, start_server
from tests.service.distill.teacher.teacher_servers import TeacherServer, TinyLM, serve, write_tokenizer

TOL = 1e-5


@pytest.fixture(scope="module")
def lm() -> TinyLM:
    return TinyLM(seed=1)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="module")
def teacher(lm: TinyLM, tokenizer_file: Path) -> Iterator[TeacherServer]:
    with serve("vllm", lm, tokenizer_file) as server:
        yield server


@pytest.fixture(scope="module")
def reflexa(
    tmp_path_factory: pytest.TempPathFactory, teacher: TeacherServer, tokenizer_file: Path
) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("reflexa")
    url = f"sqlite:///{root / 'reflexa.db'}"
    upgrade(url)
    env = {
        "REFLEXA_TEACHER__BASE_URL": teacher.url,
        "REFLEXA_TEACHER__PROTOCOL": "openai_completions",
        "REFLEXA_TEACHER__MODEL": "tiny",
        "REFLEXA_TEACHER__TOKENIZER_FILE": str(tokenizer_file),
        "REFLEXA_TEACHER__RETRY_BACKOFF_SECONDS": "0.001",
        "REFLEXA_WORKER__IN_PROCESS": "false",
    }
    server = start_server(url, root, env=env, log=root / "server.log")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh(teacher: TeacherServer) -> None:
    teacher.behaviour.fail.clear()
    teacher.behaviour.requests.clear()


@pytest.fixture
def client(reflexa: LiveServer) -> Iterator[Client]:
    with Client(reflexa.url, reflexa.admin_key) as admin:
        name = admin.create_namespace(f"t-{uuid.uuid4().hex[:10]}").name
    with Client(reflexa.url, reflexa.admin_key, namespace=name, backoff=0.001) as c:
        yield c


def close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(a - b) <= TOL for a, b in zip(got, want, strict=True))


def test_inline_contexts(client: Client, lm: TinyLM, tokenizer_file: Path) -> None:
    tok = Tokenizer.from_file(str(tokenizer_file))
    result = client.teacher_logprobs(
        None,
        [
            {"id": "x", "context": "a dark room", "continuation": [40, 41, 42]},
            {"context": [0, 3, 4], "continuation": "look up"},
        ],
        top_k=2,
    )
    prompt = tok.encode("a dark room").ids
    assert result.items[0].id == "x" and result.items[0].prompt_tokens == len(prompt)
    assert close(result.items[0].logprobs, lm.token_logprobs(prompt + [40, 41, 42], len(prompt)))
    look_up = tok.encode("look up", add_special_tokens=False).ids
    assert result.items[1].token_ids == look_up
    assert close(result.items[1].logprobs, lm.token_logprobs([0, 3, 4, *look_up], 3))
    assert all(len(row) == 2 and row[0].logprob >= row[1].logprob for row in result.items[0].top_k or [])
    assert result.endpoint.protocol == "openai_completions" and result.timing.requests == 1


def test_contexts_read_from_distill_contexts_and_by_reference(client: Client, lm: TinyLM, tokenizer_file: Path) -> None:
    tok = Tokenizer.from_file(str(tokenizer_file))
    steps = [
        {"state": {"observation": "you are in a hall"}, "action": "go north", "result": "a kitchen"},
        {"state": {"observation": "a kitchen key"}, "action": "take key"},
    ]
    client.create_trajectory(None, id="t1", task="open the door", steps=steps, outcome={"success": True})
    built = client.distill_contexts(None, ["t1"], ["hindsight"])
    hindsight = built.trajectories[0].steps[0].teachers["hindsight@1"]
    result = client.teacher_logprobs(
        None,
        [
            {"context": hindsight, "continuation": [20, 21]},
            {"ref": {"trajectory_id": "t1", "step": 0, "teacher": "hindsight@1"}, "continuation": [20, 21]},
        ],
        contexts={"teachers": ["hindsight"]},
    )
    prompt = tok.encode(hindsight.text or "").ids
    want = lm.token_logprobs(prompt + [20, 21], len(prompt))
    assert close(result.items[0].logprobs, want) and close(result.items[1].logprobs, want)
    assert result.items[1].context is not None and result.items[1].context.teacher == "hindsight@1"


def test_input_is_checked_before_sending(client: Client, teacher: TeacherServer) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        client.teacher_logprobs(None, [{"context": "a", "continuation": {"token_ids": [1], "text": "a"}}])
    assert caught.value.field == "items[0].continuation"
    with pytest.raises(errors.InvalidInput):
        client.teacher_logprobs(None, [{"context": "a", "ref": {"trajectory_id": "t", "step": 0}, "continuation": [1]}])
    assert not teacher.behaviour.requests


def test_a_failing_teacher_is_unavailable_and_not_retried_by_the_client(client: Client, teacher: TeacherServer) -> None:
    teacher.behaviour.fail.extend([500] * 3)
    with pytest.raises(errors.Unavailable) as caught:
        client.teacher_logprobs(None, [{"context": [0, 1], "continuation": [2]}])
    assert (caught.value.status, caught.value.rule) == (502, "teacher_unavailable")
    assert teacher.url in str(caught.value)
    assert len(teacher.behaviour.scoring_requests("/v1/completions")) == 3  # the server's three tries, once


@pytest.mark.anyio
async def test_the_async_client(reflexa: LiveServer, lm: TinyLM) -> None:
    async with AsyncClient(reflexa.url, reflexa.admin_key) as client:
        ns = (await client.create_namespace(f"t-{uuid.uuid4().hex[:10]}")).name
        result: Any = await client.teacher_logprobs(ns, [{"context": [0, 9], "continuation": [10, 11]}], entropy=True)
    assert close(result.items[0].logprobs, lm.token_logprobs([0, 9, 10, 11], 2))
    assert result.items[0].entropies is not None and len(result.items[0].entropies) == 2
