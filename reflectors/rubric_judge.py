"""The LLM judge of rubric rewards: grades the criteria of a rubric that no rule
decides (service/rubrics/scores.py plans what to ask; this answers).

One `complete_json` call per judge task (a scored trajectory, or one stage of it)
grades all of its judged criteria at once with the `rubric_judge` prompt, through
the same LLMClient as the reflectors: strict JSON (one repair turn), the openai
client's retries, the namespace's daily token budget shared in SQL. Tasks of a
batch run concurrently, at most `llm.max_concurrency` at a time.

Built once per API process by the container (`build_rubric_judge`); the service
reaches it through the `RubricJudge` protocol (the HTTP service never imports the
workers). LLM failures become domain errors: `Unavailable` (503) naming the
criterion, with rule `llm_budget` (the namespace spent its tokens for the day),
`llm_unavailable` (endpoint down, overloaded or slow), `llm_request` (the endpoint
refused the request) or `llm_output` (no usable answer after the repair turn).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from domain.errors import Unavailable
from reflectors.llm_client import (
    LLMBudgetExceeded,
    LLMClient,
    LLMOutputError,
    LLMRequestError,
    LLMSettings,
    LLMUnavailable,
    SqlTokenBudget,
)
from reflectors.llm_client.schemas import RubricJudgeOut
from reflectors.prompts import load_prompt
from reflectors.prompts.steps import render_steps, shorten
from service.rubrics.checks import MISSING, as_text, scope_values
from service.rubrics.content import label_text
from service.rubrics.scores import JudgeTask, Verdict
from store.database import Database

PROMPT = ("rubric_judge", 1)
MAX_STEPS = 40  # steps shown per task: the first quarter and the rest from the end
FIELD_CHARS = 1_500
ANSWER_CHARS = 6_000


def _steps_text(task: JudgeTask) -> str:
    steps = [
        {"index": s.index, "observation": s.observation, "action": s.action, "result": s.result}
        for s in task.episode.steps
    ]
    if len(steps) <= MAX_STEPS:
        return render_steps(steps, max_field_chars=FIELD_CHARS)
    head = steps[: MAX_STEPS // 4]
    tail = steps[len(steps) - (MAX_STEPS - len(head)) :]
    omitted = len(steps) - len(head) - len(tail)
    return (
        render_steps(head, max_field_chars=FIELD_CHARS)
        + f"\n\n(… {omitted} steps omitted …)\n\n"
        + render_steps(tail, max_field_chars=FIELD_CHARS)
    )


def judge_messages(task: JudgeTask) -> list[dict[str, str]]:
    """The prompt for one judge task."""
    answers = scope_values(task.episode, "final_answer")
    label = task.episode.label
    return load_prompt(*PROMPT).render(
        task=task.episode.task,
        stage="the whole attempt" if task.stage is None else f"stage {task.stage} of the attempt",
        steps=_steps_text(task),
        final_answer=shorten(as_text(answers[0]), ANSWER_CHARS) if answers else None,
        reference=None if label is MISSING or label is None else shorten(label_text(label), ANSWER_CHARS),
        criteria=json.dumps([{"id": c.id, "text": c.text} for c in task.criteria], ensure_ascii=False, indent=2),
    )


class LLMRubricJudge:
    """Judges rubric criteria with an LLM (see the module docstring)."""

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm

    def close(self) -> None:
        self.llm.close()

    def judge(self, namespace: str, tasks: Sequence[JudgeTask]) -> list[dict[str, Verdict]]:
        if not tasks:
            return []
        if len(tasks) == 1:
            return [self._one(namespace, tasks[0])]
        workers = min(len(tasks), self.llm.settings.max_concurrency)
        with ThreadPoolExecutor(workers, thread_name_prefix="rubric-judge") as pool:
            return list(pool.map(lambda t: self._one(namespace, t), tasks))

    def _one(self, namespace: str, task: JudgeTask) -> dict[str, Verdict]:
        first = task.criteria[0]
        ids = [c.id for c in task.criteria]
        what = f"judged criteria {ids}" + ("" if task.stage is None else f" (stage {task.stage!r})")
        try:
            result = self.llm.complete_json(
                judge_messages(task),
                RubricJudgeOut,
                namespace=namespace,
                purpose=f"{PROMPT[0]}.v{PROMPT[1]}",
                context={"known_ids": ids},
            )
        except LLMBudgetExceeded as exc:
            raise _unavailable(f"cannot judge {what}: {exc}", first.field, "llm_budget") from exc
        except LLMUnavailable as exc:
            raise _unavailable(f"cannot judge {what}: {exc}", first.field, "llm_unavailable") from exc
        except LLMRequestError as exc:
            raise _unavailable(f"cannot judge {what}: {exc}", first.field, "llm_request") from exc
        except LLMOutputError as exc:
            problem = exc.errors[-1] if exc.errors else "unusable output"
            message = f"cannot judge {what}: the LLM gave no usable answer after a repair turn ({problem})"
            raise _unavailable(message, first.field, "llm_output") from exc
        return {v.id: Verdict(v.score, v.rationale) for v in result.parsed.verdicts}


def _unavailable(message: str, field: str, rule: str) -> Unavailable:
    return Unavailable(message, field=field, rule=rule)


def build_rubric_judge(settings: LLMSettings, db: Database) -> LLMRubricJudge | None:
    """The process's judge, on the configured LLM and the shared SQL token budget;
    None with no LLM configured (judged criteria then answer 503, or are skipped)."""
    if not settings.enabled:
        return None
    budget = SqlTokenBudget(db, settings.token_budget_per_namespace_per_day)
    return LLMRubricJudge(LLMClient(settings, budget=budget))
