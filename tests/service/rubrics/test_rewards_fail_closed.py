"""Rewards fail closed (issue 21), over HTTP on SQLite and PostgreSQL: a response
OpenRLHF's query does not let us locate is located by the prompt's longest
whitespace-normalised suffix or refused (422 `prompt_not_found` naming `query[i]`),
never scored together with its prompt; a label a numeric check cannot read is a 422
(`label_not_numeric` naming the label's field), never a silent 0; answers are read
from `\\boxed{…}` and final-answer lines in responses and labels alike (GSM8K's
`answer` column yields its `#### 72`).

OpenRLHF (OpenRLHF/OpenRLHF@3c3be6234e0c, openrlhf/utils/agent.py,
SingleTurnAgentExecutor.execute) tokenizes the prompt, keeps
`prompt_token_ids[-max_prompt_length:]` when it is too long, and POSTs
`decode(prompt_ids + action_ids, skip_special_tokens=False)` as the query with the
*original* prompt string: the query then starts inside the prompt, and the decoded
text may space things differently from the prompt.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import RIGHT_NUMBER
from tests.fixtures import create_namespace

NS = "/v1/namespaces/lab"

GSM = {
    "id": "gsm",
    "name": "grade-school math",
    "criteria": [
        RIGHT_NUMBER,
        {"id": "shows_work", "text": "Shows its arithmetic.", "weight": 1, "check": {"type": "contains", "text": "="}},
    ],
}
PREAMBLE = (
    "<|im_start|>system\nYou are a careful assistant. Think step by step, show every intermediate "
    "result, and end with the final number on its own line.<|im_end|>\n"
)
PROMPT = PREAMBLE + "<|im_start|>user\nWhat is 6*7? Answer with a number.<|im_end|>\n<|im_start|>assistant\n"
GSM8K_ANSWER = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "lab")
    assert client.post(f"{NS}/rubrics", json=GSM).status_code == 201
    return client


@pytest.fixture
def reward_path(api: TestClient) -> str:
    r = api.post(f"{NS}/rubrics/gsm/capabilities", json={"note": "fail closed"})
    assert r.status_code == 201, r.text
    return r.json()["path"]  # type: ignore[no-any-return]


def openrlhf(api: TestClient, path: str, query: list[str], prompts: list[str], labels: list[Any]) -> Any:
    """POST as OpenRLHF does: no Authorization header."""
    return api.post(path, json={"query": query, "prompts": prompts, "labels": labels}, headers={"Authorization": ""})


def error(r: Any) -> tuple[int, str | None, str | None, str]:
    e = r.json()["error"]
    return r.status_code, e.get("field"), e.get("rule"), e["message"]


# -- OpenRLHF: where the response starts ---------------------------------------------------


def test_a_left_cut_prompt_is_located_by_its_suffix_not_scored(api: TestClient, reward_path: str) -> None:
    wrong = "I don't know<|im_end|>"
    # The prompt whole in the query: the response alone is scored (no number in it: 0).
    r = openrlhf(api, reward_path, [PROMPT + wrong], [PROMPT], ["7"])
    assert r.status_code == 200 and r.json()["rewards"] == [0.0], r.text
    # OpenRLHF cut the prompt's first tokens; the query starts inside the prompt.
    cut = PROMPT[40:]
    r = openrlhf(api, reward_path, [cut + wrong], [PROMPT], ["7"])
    assert r.status_code == 200 and r.json()["rewards"] == [0.0], r.text  # not 0.75: the prompt's 7 is not read
    # Cut, and decoded with different spacing (a tokenizer's clean-up, a dropped leading space).
    respaced = cut.replace("6*7?", "6 * 7 ?").replace(". ", ".  ").lstrip()
    assert respaced not in PROMPT
    r = openrlhf(api, reward_path, [respaced + "6 * 7 = 42<|im_end|>", respaced + wrong], [PROMPT, PROMPT], [42, 7])
    assert r.status_code == 200 and r.json()["rewards"] == [1.0, 0.0], r.text
    assert r.json()["extra_logs"] == {"rubric/correct": [1.0, 0.0], "rubric/shows_work": [1.0, 0.0]}


def test_a_response_that_cannot_be_located_is_refused_naming_the_query(api: TestClient, reward_path: str) -> None:
    other = "<|im_start|>user\nWhat is 3+4?<|im_end|>\n<|im_start|>assistant\n"
    queries = [PROMPT + "42", "Something else entirely: 7"]
    r = openrlhf(api, reward_path, queries, [PROMPT, other], [42, 7])
    status, field, rule, message = error(r)
    assert (status, field, rule) == (422, "query[1]", "prompt_not_found"), r.text
    assert "prompts[1]" in message
    # A suffix shorter than the minimum overlap does not locate it ("assistant\n" alone is not enough).
    r = openrlhf(api, reward_path, ["assistant\n7"], [PROMPT], [7])
    assert error(r)[:3] == (422, "query[0]", "prompt_not_found")


# -- labels a numeric check cannot read ----------------------------------------------------


def test_a_label_that_is_not_a_number_is_refused(api: TestClient, reward_path: str) -> None:
    inline = {"task": "6*7", "steps": [{"state": {"observation": "6*7?"}, "action": "6*7 = 42"}]}
    r = api.post(f"{NS}/rubrics/gsm/score", json={"trajectory": inline, "label": "forty-two"})
    status, field, rule, message = error(r)
    assert (status, field, rule) == (422, "label", "label_not_numeric"), r.text
    assert "'correct'" in message and "forty-two" in message
    r = api.post(
        f"{NS}/rubrics/gsm/score/batch",
        json={"items": [{"trajectory": inline, "label": 42}, {"trajectory": inline, "label": "Natalia sold 3 clips"}]},
    )
    assert error(r)[:3] == (422, "items[1].label", "label_not_numeric"), r.text
    r = openrlhf(api, reward_path, [PROMPT + "42", PROMPT + "42"], [PROMPT, PROMPT], [42, {"n": 42}])
    assert error(r)[:3] == (422, "labels[1]", "label_not_numeric"), r.text


def test_answers_are_read_from_boxed_and_final_answer_lines(api: TestClient, reward_path: str) -> None:
    def reward(answer: str, label: Any) -> float:
        inline = {"task": "t", "steps": [{"state": {"observation": "o"}, "action": answer}]}
        r = api.post(f"{NS}/rubrics/gsm/score", json={"trajectory": inline, "label": label})
        assert r.status_code == 200, r.text
        return r.json()["criteria"][0]["score"]  # type: ignore[no-any-return]

    # GSM8K's answer column as the label: its "#### 72".
    assert reward(r"24 + 48 = 72, so \boxed{72}", GSM8K_ANSWER) == 1.0
    assert reward(r"\boxed{71} ... no wait, \boxed{72}. Checked with 3 examples.", GSM8K_ANSWER) == 1.0
    assert reward("The answer is 72. (I used 3 steps.)", "#### 72") == 1.0
    assert reward("Final answer: 1,234.5 after 2 checks", r"\boxed{1234.5}") == 1.0
    assert reward("**The final answer is** $72$ (from step 3)", "The answer is 72") == 1.0
    assert reward("#### 72\nbecause 8 * 9", 72) == 1.0
    assert reward(r"\boxed{x+1}, i.e. 72", 72) == 0.0  # the boxed answer is no number
    assert reward("I think it is 70 or 72", "72") == 1.0  # no marker: the last number, as before
    # Through OpenRLHF too.
    r = openrlhf(api, reward_path, [PROMPT + r"6*7 = \boxed{42}"], [PROMPT], ["The answer is 42."])
    assert r.status_code == 200 and r.json()["rewards"] == [1.0], r.text
