"""OpenRLHF's remote reward model protocol, on a rubric (POST /v1/reward/{capability}).

OpenRLHF (`--remote_rm_url`; openrlhf/utils/agent.py, SingleTurnAgentExecutor.
_fetch_rewards_via_http) POSTs `{"query": [...], "prompts": [...], "labels": [...]}`
with only a Content-Type header and reads `rewards` (the reward), `scores` (in [0, 1],
for its dynamic filtering) and `extra_logs` (logged per sample) from the answer.

Each query is the decoded prompt + response (special tokens kept). The response
scored is what follows the prompt: the query minus its prompt prefix, or what
follows the prompt's first occurrence (a BOS token may precede it), or the whole
query when no prompt is given or it is not in the query. Each item becomes an
inline trajectory of one step: the task and observation are the prompt (the query
without a prompt), the action and the final answer are the response, and the label
is the item's ground truth for `{{label}}` (a null or empty label is no label).
"""

from __future__ import annotations

from domain.errors import InvalidInput
from service.rubrics.checks import MISSING
from service.rubrics.schemas import OpenRLHFRequest, OpenRLHFResponse
from service.rubrics.service import ItemSpec, RubricService, Scored
from service.trajectories.schemas import State, StepCreate, TrajectoryCreate


def response_of(query: str, prompt: str | None) -> str:
    """The response part of OpenRLHF's query (see the module docstring)."""
    if not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt) :]
    at = query.find(prompt)
    return query[at + len(prompt) :] if at >= 0 else query


def items(body: OpenRLHFRequest) -> list[ItemSpec]:
    n = len(body.query)
    for name, values in (("prompts", body.prompts), ("labels", body.labels)):
        if values is not None and len(values) != n:
            raise InvalidInput(
                f"{name} has {len(values)} items and query {n}; they are one per query",
                field=name,
                rule="same_length",
            )
    out = []
    for i, query in enumerate(body.query):
        prompt = body.prompts[i] if body.prompts is not None else None
        response = response_of(query, prompt)
        label = body.labels[i] if body.labels is not None else None
        trajectory = TrajectoryCreate(
            task=prompt or query or "(empty query)",
            steps=[StepCreate(state=State(observation=prompt or ""), action=response)],
        )
        out.append(
            ItemSpec(
                trajectory_id=None,
                trajectory=trajectory,
                final_answer=response,
                label=MISSING if label is None or label == "" else label,
                trajectory_field=f"query[{i}]",
                label_field=f"labels[{i}]",
                inline_field=f"query[{i}]",
                final_answer_field=f"query[{i}]",
            )
        )
    return out


def response(scored: Scored) -> OpenRLHFResponse:
    rewards = [s.reward if s.reward is not None else 0.0 for s in scored.scores]
    logs: dict[str, list[float]] = {}
    for s in scored.scores:
        for c in s.criteria:
            logs.setdefault(f"rubric/{c.id}", []).append(c.score if c.score is not None else 0.0)
    return OpenRLHFResponse(rewards=rewards, scores=list(rewards), extra_logs=logs)


def score(rubrics: RubricService, secret: str, body: OpenRLHFRequest) -> OpenRLHFResponse:
    """The route: the capability's rubric on each query (no judged criterion is
    skipped: without an LLM for them, the answer is a 503 and OpenRLHF's retries fail loudly)."""
    ns, rubric_id = rubrics.capabilities.resolve(secret)
    rubrics.checker.batch_size(len(body.query), "query", rubrics.checker.limits.max_batch_trajectories)
    return response(rubrics.score_items(ns, rubric_id, items(body), snapshot=None, skip_judged=False))
