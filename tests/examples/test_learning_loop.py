"""The learning loop end to end against a live server: a few BabyAI episodes by the
Reflexa agent, then what the server holds is checked through the client."""

from __future__ import annotations

from reflexa import Client

from examples.babyai.env import BabyAIGoTo
from examples.common.agents import ReflexaAgent
from examples.common.memory_policy import MemoryParams, nearest

WORLD = 559032  # a GoToLocal train world whose target is one step from the start
NAMESPACE = "examples-loop"


def test_episodes_are_stored_indexed_recalled_and_credited(live_server) -> None:  # type: ignore[no-untyped-def]
    admin = Client(live_server.url, api_key=live_server.admin_key)
    admin.create_namespace(NAMESPACE, {"state_text": {"fields": ["observation"]}})
    client = Client(live_server.url, api_key=admin.create_key(role="agent", namespaces=[NAMESPACE]).key)
    env = BabyAIGoTo("BabyAI-GoToLocal-v0", view="scene", max_steps=12)
    agent = ReflexaAgent(client, NAMESPACE, seed=0)

    results = [agent.run(env, WORLD, "train") for _ in range(4)]

    # Trajectories: every episode stored, closed, with all its steps and its outcome.
    stored = {t.id: t for t in client.list_trajectories(NAMESPACE, limit=10).items}
    assert len(stored) == 4
    assert sorted(t.step_count for t in stored.values()) == sorted(r.steps for r in results)
    assert sorted(bool(t.outcome and t.outcome.success) for t in stored.values()) == sorted(r.success for r in results)

    # Exemplars indexed, and retrieval by a state returns that very state first, on
    # the server's default ranking (the namespace sets only its state text), flagged
    # as an exact match: the agent acts on the flag, not on a similarity threshold.
    start = env.reset(WORLD, "train")
    situation = agent.situation(start)  # where the episode began, where the agent is
    hits = client.retrieve(NAMESPACE, start.text, data=situation, internal_state=start.subgoal, kinds=["exemplar"], k=5)
    top = hits.items[0]
    assert top.kind == "exemplar" and top.exact_match
    assert top.content["observation"] == start.text and top.content["state_data"] == situation
    assert top.content["internal_state"] == start.subgoal
    assert top.state_similarity > 0.999 and top.similarity > 0.999
    assert top.content["action"] in start.actions
    exact = [i for i in hits.items if i.exact_match]
    assert hits.items[: len(exact)] == exact  # exact matches rank above every other item
    assert all(i.content["observation"] == start.text for i in exact)
    same, level = nearest(hits.items, MemoryParams(), situation)
    assert level == "same" and same and all(i.content["state_data"] == situation for i in same)

    # Outcomes moved utility: the start state's exemplars were served to later
    # episodes, whose outcomes credited them.
    served = [i for i in hits.items if i.content["observation"] == start.text]
    assert sum(i.utility.uses for i in served) > 0
    assert all(i.utility.uses == i.utility.successes + i.utility.failures for i in served)

    # The agent acted on what came back: once an episode won, the next one recalled
    # the winning action instead of exploring, and won at least as fast.
    first_win = next(i for i, r in enumerate(results) if r.success)
    assert first_win < 3, [(r.success, r.steps) for r in results]
    after = results[first_win + 1]
    assert after.recalled > 0 and after.success and after.steps <= results[first_win].steps
    env.close()
    client.close()
    admin.close()
