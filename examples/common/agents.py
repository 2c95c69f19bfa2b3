"""The three agents compared in every run, sharing one episode loop.

- ``random``: a uniformly random valid action.
- ``memoryless``: the within-episode rules alone (:mod:`examples.common.rules`).
- ``reflexa``: before each action it retrieves exemplars by its current state and
  subgoal and acts on them (:mod:`examples.common.memory_policy`), falling back to
  the same rules; every episode is logged through ``client.episode(...)``, and the
  retrievals are tied to it, so its outcome credits what was served (utility).

Only the Reflexa agent remembers anything across episodes, and only through the
server: it keeps no state of its own between episodes.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from reflexa import Client, Episode

from examples.common.env_api import Observation, TextEnv, Transition
from examples.common.memory_policy import MemoryParams, choose, evidence_by_action, nearest
from examples.common.rules import EpisodeRules

Decide = Callable[[Observation, EpisodeRules], tuple[str, str]]
OnStep = Callable[[Observation, str, Transition], None]


@dataclass(frozen=True)
class EpisodeResult:
    world: int
    success: bool
    steps: int
    reward: float
    recalled: int  # actions chosen on recalled evidence (0 for the baselines)
    truncated: bool  # ended by the step limit rather than won or lost


def play(
    env: TextEnv, world: int, split: str, decide: Decide, rng: random.Random, on_step: OnStep | None = None
) -> EpisodeResult:
    obs = env.reset(world, split)
    rules = EpisodeRules(rng)
    steps = recalled = 0
    reward = 0.0
    while True:
        action, why = decide(obs, rules)
        tr = env.step(action)
        rules.observe(obs.text, action, tr.observation.text)
        if on_step is not None:
            on_step(obs, action, tr)
        steps += 1
        recalled += why == "memory"
        reward += tr.reward
        obs = tr.observation
        if tr.done:
            return EpisodeResult(world, tr.success, steps, reward, recalled, tr.truncated)
        if steps >= env.max_steps:  # an environment that forgot its own limit must not hang the run
            raise RuntimeError(f"{env.name} ran past its {env.max_steps}-step limit without ending the episode")


class RandomAgent:
    name = "random"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def run(self, env: TextEnv, world: int, split: str) -> EpisodeResult:
        return play(env, world, split, lambda obs, rules: (self._rng.choice(obs.actions), "explore"), self._rng)


class MemorylessAgent:
    name = "memoryless"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def run(self, env: TextEnv, world: int, split: str) -> EpisodeResult:
        def decide(obs: Observation, rules: EpisodeRules) -> tuple[str, str]:
            return rules.explore(obs.text, rules.allowed(obs.text, obs.actions)), "explore"

        return play(env, world, split, decide, self._rng)


class ReflexaAgent:
    name = "reflexa"

    def __init__(
        self,
        client: Client,
        namespace: str,
        seed: int,
        *,
        k: int = 60,
        params: MemoryParams | None = None,
        credit_acted: bool = False,
    ) -> None:
        """credit_acted: report each retrieval's outcome naming only the exemplars
        the agent acted on (`item_ids`), instead of letting the episode's outcome
        credit everything that was served."""
        if credit_acted:
            self.name = "reflexa-acted"
        self._credit_acted = credit_acted
        self._acted: list[tuple[str, list[str]]] = []  # (retrieval id, items acted on)
        self.namespace = namespace
        self.task = ""
        self._start = ""
        self._client = client
        self._rng = random.Random(seed)
        self._k = k
        self._params = params or MemoryParams()

    def run(self, env: TextEnv, world: int, split: str) -> EpisodeResult:
        # The task is known only after reset, and the episode needs it: reset first,
        # then replay the same world inside `play` (reset is deterministic per seed).
        self._start = env.reset(world, split).text
        self.task = env.task
        with self._client.episode(
            self.namespace,
            task=env.task,
            environment=env.name,
            agent=self.name,
            metadata={"world": world, "split": split},
        ) as ep:

            def decide(obs: Observation, rules: EpisodeRules) -> tuple[str, str]:
                return self.decide(ep, obs, rules)

            def log(obs: Observation, action: str, tr: Transition) -> None:
                ep.step(
                    obs.text,
                    action,
                    state_data=self.situation(obs),
                    internal_state=obs.subgoal,
                    result=tr.result,
                    reward=tr.reward,
                    done=tr.done and not tr.truncated,
                    truncated=tr.truncated,
                    caused_failure=tr.caused_failure,
                )

            self._acted = []
            result = play(env, world, split, decide, self._rng, log)
            for retrieval_id, item_ids in self._acted:  # before the close, which credits the rest
                self._client.report_retrieval_outcome(
                    self.namespace, retrieval_id, success=result.success, reward=result.reward, item_ids=item_ids
                )
            ep.finish(
                success=result.success,
                reward=result.reward,
                failure_reason=None if result.success else "step limit" if result.truncated else "game lost",
            )
        return result

    def decide(self, ep: Episode, obs: Observation, rules: EpisodeRules) -> tuple[str, str]:
        """Retrieve by the current state and subgoal, act on the nearest evidence in
        the server's order (its exact matches first)."""
        situation = self.situation(obs)
        hits = ep.retrieve(obs.text, data=situation, internal_state=obs.subgoal, kinds=["exemplar"], k=self._k)
        near, level = nearest(hits.items, self._params, situation)
        evidence = evidence_by_action(near, obs.actions)
        action, why = choose(evidence, rules, obs.text, obs.actions, self._params, exact=level in ("same", "state"))
        if self._credit_acted:  # exploring acted on nothing recalled: credit nothing
            acted = [i.id for i in near if i.content.get("action") == action] if why == "memory" else []
            self._acted.append((hits.retrieval_id, acted))
        return action, why

    def situation(self, obs: Observation) -> dict[str, str]:
        """Structured state sent with every step: where this episode began (a digest
        of its first observation) and what the agent tracks itself (if anything).

        Two worlds can share a room that looks the same (same furniture, same
        exits) while the goal lies elsewhere, and a stretch of wall looks the same
        all along. The server merges exemplars by (observation, structured state,
        action), so with this they stay apart per world and place, and the agent
        can tell "this very situation" from "the same view elsewhere". It is not
        embedded (the namespace's state text is the observation only), so in a
        world never seen the same view met elsewhere is still found, and still an
        exact match for the server; the agent tells the two apart by the
        ``state_data`` each exemplar carries (:func:`~examples.common.memory_policy.nearest`).
        """
        out = {"episode_start": hashlib.sha256(self._start.encode()).hexdigest()[:16]}
        if obs.tracking:
            out["tracking"] = obs.tracking
        return out
