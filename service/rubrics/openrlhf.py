"""OpenRLHF's remote reward model protocol, on a rubric (POST /v1/reward/{capability}).

OpenRLHF (`--remote_rm_url`; openrlhf/utils/agent.py, SingleTurnAgentExecutor.
_fetch_rewards_via_http) POSTs `{"query": [...], "prompts": [...], "labels": [...]}`
with only a Content-Type header and reads `rewards` (the reward), `scores` (in [0, 1],
for its dynamic filtering) and `extra_logs` (logged per sample) from the answer.

Each query is the decoded prompt + response (special tokens kept). The response
scored is what follows the prompt, found in this order (`response_of`):
1. the query minus its prompt prefix;
2. what follows the prompt's first occurrence (a BOS token may precede it);
3. what follows the first occurrence of the prompt's longest suffix found in the
   query, both compared with all whitespace removed, when that suffix has at least
   MIN_OVERLAP (32) non-whitespace characters, or is the whole prompt. OpenRLHF
   (openrlhf/utils/agent.py, SingleTurnAgentExecutor.execute) keeps only
   `prompt_token_ids[-max_prompt_length:]` of a prompt too long for its budget, and
   decoding may space the text differently from the prompt string it sends (a
   tokenizer's clean-up of spaces, a dropped leading space), so the query may start
   inside the prompt. 32 characters: what OpenRLHF keeps is max_len − max_new_tokens
   tokens, far more than that; a chance occurrence of the prompt's last 32
   characters inside a response is implausible; and it is longer than the
   assistant header a chat template ends a prompt with (`<|im_start|>assistant` is
   21), so the match reaches into the prompt itself.
Otherwise the item is refused: 422 naming `query[i]`, rule `prompt_not_found` —
scoring the whole query would score the prompt too (a label's number written in the
prompt would pass a numeric check). With no prompt for an item (the older
remote_rm_fn sent the queries alone) the whole query is the response.

Each item becomes an inline trajectory of one step: the task and observation are
the prompt (the query without a prompt), the action and the final answer are the
response, and the label is the item's ground truth for `{{label}}` (a null or empty
label is no label).
"""

from __future__ import annotations

from domain.errors import InvalidInput
from service.rubrics.checks import MISSING
from service.rubrics.schemas import OpenRLHFRequest, OpenRLHFResponse
from service.rubrics.service import ItemSpec, RubricService, Scored
from service.trajectories.schemas import State, StepCreate, TrajectoryCreate

MIN_OVERLAP = 32  # non-whitespace characters of the prompt's end that must be found (see above)


def _squeezed(text: str) -> tuple[str, list[int]]:
    """The text without whitespace, and the index in `text` of each character kept."""
    kept = [i for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(text[i] for i in kept), kept


def _end_of_suffix(query: str, prompt: str) -> int | None:
    """Where the prompt ends in the query, by its longest whitespace-normalised suffix
    found there (at least MIN_OVERLAP characters, or the whole prompt); None if none is."""
    q, positions = _squeezed(query)
    p, _ = _squeezed(prompt)
    if not p:
        return None
    # A suffix found means its own suffixes are found too: the longest is a binary search.
    low, high = 0, len(p)  # low: a length found (0: trivially); high: the longest possible
    while low < high:
        mid = (low + high + 1) // 2
        if p[-mid:] in q:
            low = mid
        else:
            high = mid - 1
    if low < min(MIN_OVERLAP, len(p)):
        return None
    end = positions[q.find(p[-low:]) + low - 1] + 1
    if prompt[-1:].isspace():  # the prompt's trailing whitespace is the prompt's, not the response's
        while end < len(query) and query[end].isspace():
            end += 1
    return end


def response_of(query: str, prompt: str | None) -> str | None:
    """The response part of OpenRLHF's query (see the module docstring); None when
    the prompt cannot be located in it."""
    if not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt) :]
    at = query.find(prompt)
    if at >= 0:
        return query[at + len(prompt) :]
    end = _end_of_suffix(query, prompt)
    return None if end is None else query[end:]


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
        if response is None:
            raise InvalidInput(
                f"the response in query[{i}] cannot be located: neither prompts[{i}] nor its last "
                f"{MIN_OVERLAP} non-whitespace characters occur in it (is prompts[{i}] the prompt of query[{i}]?); "
                "scoring the whole query would score the prompt too",
                field=f"query[{i}]",
                rule="prompt_not_found",
            )
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
    skipped: without an LLM for them, the answer is a 503 — a refusal, never a partial
    reward; OpenRLHF retries it, then logs it at info and leaves the sample unrewarded)."""
    ns, rubric_id = rubrics.capabilities.resolve(secret)
    rubrics.checker.batch_size(len(body.query), "query", rubrics.checker.limits.max_batch_trajectories)
    return response(rubrics.score_items(ns, rubric_id, items(body), snapshot=None, skip_judged=False))
