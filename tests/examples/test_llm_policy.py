"""The LLM-policy variant's prompt and parsing, against a tiny fake endpoint."""

from __future__ import annotations

import random
from types import SimpleNamespace

from examples.common.env_api import Observation
from examples.common.llm_policy import LLMReflexaAgent, build_messages, parse_action
from examples.common.rules import EpisodeRules

ACTIONS = ("move north", "take coin", "take")
OBS = Observation(text="You are in the kitchen. You see a coin.", subgoal="find the coin", actions=ACTIONS)


def test_prompt_holds_task_state_context_and_numbered_actions() -> None:
    system, user = build_messages("find the coin", OBS, "## Past experience\n- take coin (3/3 succeeded)", ACTIONS)
    assert system["role"] == "system" and "number" in system["content"]
    text = user["content"]
    assert "Task: find the coin" in text and OBS.text in text and "3/3 succeeded" in text
    assert "1. move north\n2. take coin\n3. take" in text
    assert "No past experience" in build_messages("t", OBS, None, ACTIONS)[1]["content"]


def test_parse_accepts_numbers_names_and_sentences() -> None:
    assert parse_action("2", ACTIONS) == "take coin"
    assert parse_action(" 1. move north", ACTIONS) == "move north"
    assert parse_action("`Take Coin`", ACTIONS) == "take coin"
    assert parse_action("I would take coin now.", ACTIONS) == "take coin"  # the longest action named
    assert parse_action("9", ACTIONS) is None
    assert parse_action("dance", ACTIONS) is None
    assert parse_action(None, ACTIONS) is None


class FakeLLM:
    """Just enough of ``openai.OpenAI``: ``chat.completions.create`` returning a reply."""

    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.calls: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append(kwargs)
        if isinstance(self.reply, Exception):
            raise self.reply
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=self.reply))])


class FakeEpisode:
    def __init__(self) -> None:
        self.asked: dict = {}

    def retrieve(self, observation: str, **kwargs):  # type: ignore[no-untyped-def]
        self.asked = {"observation": observation, **kwargs}
        return SimpleNamespace(items=[object()], context="## Past experience\n- take coin")


def _agent(llm: FakeLLM) -> LLMReflexaAgent:
    agent = LLMReflexaAgent(client=None, namespace="ns", seed=0, llm=llm, model="m")  # type: ignore[arg-type]
    agent.task = "find the coin"
    return agent


def test_decide_sends_the_rendered_context_and_acts_on_the_reply() -> None:
    llm, ep = FakeLLM("2"), FakeEpisode()
    action, why = _agent(llm).decide(ep, OBS, EpisodeRules(random.Random(0)))  # type: ignore[arg-type]
    assert (action, why) == ("take coin", "memory")
    assert (
        ep.asked["render"]["max_chars"] <= 2000
        and ep.asked["internal_state"] == "find the coin"
        and "episode_start" in ep.asked["data"]
    )
    call = llm.calls[0]
    assert call["model"] == "m" and call["max_tokens"] <= 32
    assert "- take coin" in call["messages"][1]["content"]


def test_a_failed_call_or_a_useless_reply_falls_back_to_exploring() -> None:
    for reply in (RuntimeError("endpoint down"), "no idea"):
        action, why = _agent(FakeLLM(reply)).decide(FakeEpisode(), OBS, EpisodeRules(random.Random(0)))  # type: ignore[arg-type]
        assert why == "explore" and action in ACTIONS
