"""One experiment: every agent, every run seed, one regime, on one environment.

Regimes (worlds are the environment's own seeds, drawn from one split only):

- ``pool``: a fixed pool of ``pool_size`` worlds, visited in turn: can memory
  recall what worked in a world it has seen?
- ``novel``: every episode a world never played before: does what was learned in
  other worlds carry over?

Each Reflexa run gets a fresh namespace, so runs never share memory. The baselines
play the very same sequence of worlds.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from reflexa import Client

from examples.common.agents import EpisodeResult, MemorylessAgent, RandomAgent, ReflexaAgent
from examples.common.env_api import TextEnv
from examples.common.progress import Progress

REGIMES = ("pool", "novel")


class Agent(Protocol):
    name: str

    def run(self, env: TextEnv, world: int, split: str) -> EpisodeResult: ...


@dataclass
class Experiment:
    env_name: str
    regime: str
    seeds: int = 3
    episodes: int = 60
    pool_size: int = 5
    split: str = "train"
    agents: Sequence[str] = ("reflexa", "memoryless", "random")
    settings: Mapping[str, Any] = field(default_factory=dict)  # the Reflexa namespaces' settings

    def __post_init__(self) -> None:
        if self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {REGIMES}, not {self.regime!r}")


def worlds(env: TextEnv, regime: str, split: str, run_seed: int, episodes: int, pool_size: int) -> list[int]:
    seeds = env.splits.seeds(split)
    rng = random.Random(f"worlds:{run_seed}")
    if regime == "pool":
        pool = rng.sample(seeds, pool_size)
        return [pool[i % pool_size] for i in range(episodes)]
    return rng.sample(seeds, episodes)  # distinct: no world comes back


class AgentFactory:
    """Makes the agents of one run; a Reflexa agent gets its own namespace and an agent key."""

    def __init__(
        self,
        admin: Client | None,
        url: str | None,
        settings: Mapping[str, Any],
        extra: Mapping[str, Callable[..., Agent]] | None = None,
    ) -> None:
        self._admin = admin
        self._url = url
        self._settings = dict(settings)
        self._extra = dict(extra or {})
        self.clients: list[Client] = []
        self.namespaces: list[str] = []

    def make(self, name: str, exp: Experiment, run_seed: int) -> Agent:
        if name == "random":
            return RandomAgent(run_seed)
        if name == "memoryless":
            return MemorylessAgent(run_seed)
        if self._admin is None or self._url is None:
            raise ValueError(f"agent {name!r} needs a Reflexa server")
        env_slug = "".join(ch if ch.isalnum() else "-" for ch in exp.env_name.lower())[:24]
        namespace = f"{env_slug}-{exp.regime}-s{run_seed}-{secrets.token_hex(3)}"
        self._admin.create_namespace(namespace, self._settings)
        self.namespaces.append(namespace)
        key = self._admin.create_key(role="agent", namespaces=[namespace]).key
        client = Client(self._url, api_key=key)
        self.clients.append(client)
        if name in ("reflexa", "reflexa-acted"):
            return ReflexaAgent(client, namespace, run_seed, credit_acted=name == "reflexa-acted")
        if name in self._extra:
            return self._extra[name](client, namespace, run_seed)
        raise ValueError(f"unknown agent {name!r}")

    def rankings(self) -> dict[str, Any]:
        """Per namespace made: its lexical weight setting and the server's last
        calibration of it (what the agent's retrievals ranked with at the end)."""
        if self._admin is None:
            return {}
        out = {}
        for ns in self.namespaces:
            got = self._admin.get_namespace(ns)
            calibration = got.lexical_calibration
            out[ns] = {
                "lexical_weight": got.settings.ranking.get("lexical_weight"),
                "lexical_calibration": calibration.model_dump(mode="json") if calibration is not None else None,
            }
        return out

    def close(self) -> None:
        for client in self.clients:
            client.close()


def run(
    exp: Experiment, env: TextEnv, factory: AgentFactory, progress: Progress | None = None
) -> dict[str, list[list[EpisodeResult]]]:
    """Results per agent: one list of episode results per run seed."""
    results: dict[str, list[list[EpisodeResult]]] = {a: [] for a in exp.agents}
    for run_seed in range(exp.seeds):
        sequence = worlds(env, exp.regime, exp.split, run_seed, exp.episodes, exp.pool_size)
        for name in exp.agents:
            agent = factory.make(name, exp, run_seed)
            played = []
            for i, world in enumerate(sequence):
                played.append(agent.run(env, world, exp.split))
                if progress is not None:
                    wins = sum(r.success for r in played)
                    progress.advance(f"seed {run_seed} {name} ep {i + 1}: {wins} won")
            results[name].append(played)
    return results
