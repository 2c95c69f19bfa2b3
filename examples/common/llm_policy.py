"""The LLM-policy variant: the same loop and memory, but an LLM picks the action from
Reflexa's rendered context instead of the evidence rule.

Any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp, OpenAI) through the
``openai`` client's chat completions. The prompt stays small: the task, the
subgoal, the current state, a context block of at most ``context_chars`` and the
numbered valid actions; the model answers with one number or action. An answer
that names no valid action (or a failed call) falls back to the within-episode
rules, so a flaky endpoint slows learning down but never stops the run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from reflexa import Client, Episode

from examples.common.agents import ReflexaAgent
from examples.common.env_api import Observation
from examples.common.rules import EpisodeRules

log = logging.getLogger(__name__)

SYSTEM = (
    "You are an agent acting in a text environment. Past experience in similar states is given; "
    "prefer actions that led to success soon after (high return-to-go), avoid actions that failed. "
    "Answer with the number of exactly one valid action and nothing else."
)


def build_messages(task: str, obs: Observation, context: str | None, actions: Sequence[str]) -> list[dict[str, str]]:
    numbered = "\n".join(f"{i}. {a}" for i, a in enumerate(actions, 1))
    user = (
        f"Task: {task}\nSubgoal: {obs.subgoal}\n\nCurrent state:\n{obs.text}\n\n"
        f"{context.strip() if context else 'No past experience in similar states yet.'}\n\n"
        f"Valid actions:\n{numbered}\n\nYour answer (one number):"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_action(reply: str | None, actions: Sequence[str]) -> str | None:
    """The action a reply names: a number from the list, an exact action, or the one
    valid action the reply contains (the longest, so "take coin" beats "take")."""
    if not reply:
        return None
    text = reply.strip().strip("`'\".").strip()
    number = re.match(r"^\s*(\d+)\b", text)
    if number and 1 <= int(number.group(1)) <= len(actions):
        return actions[int(number.group(1)) - 1]
    lowered = text.lower()
    for action in actions:
        if lowered == action.lower():
            return action
    contained = [a for a in actions if a.lower() in lowered]
    return max(contained, key=len) if contained else None


class LLMReflexaAgent(ReflexaAgent):
    name = "reflexa-llm"

    def __init__(
        self, client: Client, namespace: str, seed: int, llm: Any, model: str, *, k: int = 5, context_chars: int = 1200
    ) -> None:
        super().__init__(client, namespace, seed, k=k)
        self._llm = llm  # an openai.OpenAI (or anything with .chat.completions.create)
        self._model = model
        self._context_chars = context_chars

    def decide(self, ep: Episode, obs: Observation, rules: EpisodeRules) -> tuple[str, str]:
        hits = ep.retrieve(
            obs.text,
            data=self.situation(obs),
            internal_state=obs.subgoal,
            kinds=["exemplar"],
            k=self._k,
            render={"format": "markdown", "max_chars": self._context_chars},
        )
        allowed = rules.allowed(obs.text, obs.actions)
        messages = build_messages(self.task, obs, hits.context if hits.items else None, allowed)
        try:
            reply = self._llm.chat.completions.create(
                model=self._model, messages=messages, temperature=0.0, max_tokens=16
            )
            action = parse_action(reply.choices[0].message.content, allowed)
        except Exception as exc:  # the endpoint's failure must not end the episode
            log.warning("LLM call failed, exploring instead: %s", exc)
            action = None
        if action is None:
            return rules.explore(obs.text, allowed), "explore"
        return action, "memory" if hits.items else "llm"


def llm_agent_factory(base_url: str, model: str, api_key: str) -> Callable[[Client, str, int], LLMReflexaAgent]:
    from openai import OpenAI

    llm = OpenAI(base_url=base_url, api_key=api_key, timeout=60.0, max_retries=2)
    return lambda client, namespace, seed: LLMReflexaAgent(client, namespace, seed, llm, model)
