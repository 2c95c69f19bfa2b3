"""One builder per teacher kind: pure functions from what was loaded (the episode,
retrieved items, a card, earlier attempts) to a Draft of the privileged block,
or the reason the kind does not apply. render.fit then applies the budgets and
the own-action guard.

  memory           skills, heuristics, exemplars retrieved for the step (SEED)
  hindsight@h      what the next h steps and the outcome revealed (StepOPSD, TurnSight)
  evidence_card    the task's card from its latest rollout groups (Pats)
  reflection       a failed attempt, to reflect on as flawed (ReflectRL golden negatives)
  attempt_summary  what earlier attempts established, failed at, planned (Re-TRAC, ERL)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.contexts.plain import HistoryStep, action_text, result_text
from domain.hashing import task_hash
from service.distill.contexts.render import Draft, Piece, clip, number
from service.distill.contexts.schemas import ContextTrajectory
from service.distill.repository import StepRecord, TrajectoryRecord
from service.retrieval.schemas import RetrievedItem
from store.records import record_from

OBSERVATION_CHARS = 400
RESULT_CHARS = 300
ACTION_CHARS = 300
ATTEMPT_LINES = 5  # steps listed per established / failed / planned line

MEMORY_TITLES = {
    "skill": "Skills:",
    "heuristic": "Heuristics:",
    "exemplar": "Other attempts in similar states:",
    "rubric": "Rubrics:",
    "evidence_card": "Evidence cards:",
}


@dataclass(frozen=True)
class Outcome:
    success: bool | None
    reward: float | None
    failure_reason: str | None


@dataclass(frozen=True)
class Episode:
    """A trajectory as the builders see it, stored or inline alike (an inline step is
    read into the record a stored one is read as)."""

    id: str | None
    pk: int | None  # stored: its surrogate key; inline: None
    task: str
    task_hash: str
    group_id: str | None
    parent_trajectory_id: str | None
    attempt: int | None
    outcome: Outcome | None  # None: open (stored) or not given (inline)
    steps: tuple[StepRecord, ...]


@dataclass(frozen=True)
class NotApplicable:
    reason: str


# -- episodes from what was loaded ------------------------------------------------


def history_step(s: StepRecord) -> HistoryStep:
    return HistoryStep(observation=s.observation, action=s.action, result=s.result, error=s.error, data=s.state_data)


def stored_episode(rec: TrajectoryRecord, steps: dict[int, list[StepRecord]]) -> Episode:
    """A stored trajectory as read through the views (open: no outcome)."""
    outcome = Outcome(rec.success, rec.reward, rec.failure_reason) if rec.status == "closed" else None
    return record_from(Episode, rec, outcome=outcome, steps=tuple(steps.get(rec.pk, ())))


def inline_episode(t: ContextTrajectory) -> Episode:
    """An inline trajectory of the request; its steps numbered in order."""
    assert t.task is not None
    o = t.outcome
    return Episode(
        id=t.id,
        pk=None,
        task=t.task,
        task_hash=task_hash(t.task),
        group_id=t.group_id,
        parent_trajectory_id=t.parent_trajectory_id,
        attempt=t.attempt,
        outcome=None if o is None else Outcome(o.success, o.reward, o.failure_reason),
        steps=tuple(
            StepRecord(
                index=j,
                observation=s.state.observation,
                state_data=s.state.data,
                internal_state=s.internal_state,
                action=s.action,
                result=s.result,
                error=s.error,
                reward=s.reward,
                done=s.done,
                truncated=s.truncated,
                caused_failure=s.caused_failure,
            )
            for j, s in enumerate(t.steps)
        ),
    )


def outcome_text(outcome: Outcome | None) -> str:
    if outcome is None:
        return "no outcome recorded (the attempt had not ended)"
    verdict = {True: "succeeded", False: "failed", None: "ended"}[outcome.success]
    parts = [f"the attempt {verdict}"]
    if outcome.reward is not None:
        parts.append(f"reward {number(outcome.reward)}")
    if outcome.failure_reason:
        parts.append(f"failure reason: {clip(outcome.failure_reason, RESULT_CHARS)}")
    return ", ".join(parts)


def _step_result(step: StepRecord) -> str:
    return clip(result_text(step.result, step.error), RESULT_CHARS)


# -- memory -----------------------------------------------------------------------


def _memory_line(item: RetrievedItem) -> str:
    if item.kind != "exemplar":
        return "- " + item.text.strip().replace("\n", "\n  ")
    c = item.content
    n, wins = c.get("count", 1), c.get("success_count", 0)
    line = f"- In a similar state: {clip(str(c.get('observation', '')), OBSERVATION_CHARS)}"
    line += f"\n  Action taken: {clip(action_text(c.get('action')), ACTION_CHARS)}"
    if c.get("result"):
        line += f"\n  Result: {clip(str(c['result']), RESULT_CHARS)}"
    verdict = f"{wins}/{n} attempts succeeded"
    rtg = c.get("return_to_go")
    if isinstance(rtg, int | float):
        verdict += f", return-to-go {rtg:.2f}"
    return line + f"\n  ({verdict})"


def memory_draft(items: Sequence[RetrievedItem], kinds: Sequence[str]) -> Draft | NotApplicable:
    """The retrieved items grouped by kind in the order asked (skills first by
    default: SEED's skill as privileged context), each group in rank order; the
    budget keeps the best-ranked items."""
    if not items:
        return NotApplicable("memory holds nothing for this state (after the leakage guards)")
    rank = {item.id: r for r, item in enumerate(items)}
    ordered = sorted(items, key=lambda it: (kinds.index(it.kind) if it.kind in kinds else len(kinds), rank[it.id]))
    pieces = tuple(
        Piece(_memory_line(it), rank[it.id], it.id, MEMORY_TITLES.get(it.kind, f"{it.kind}:")) for it in ordered
    )
    return Draft("memory", "items", pieces)


# -- hindsight ----------------------------------------------------------------------


def hindsight_draft(episode: Episode, position: int, horizon: int) -> Draft | NotApplicable:
    """What followed step `position` within `horizon` steps: its own result, then
    each next step's observation, action, result and reward, and the outcome when
    the attempt ended within the horizon. Conditioned on the execution, not an
    answer key: the step's own action is never shown (the guard)."""
    steps = episode.steps
    step = steps[position]
    pieces: list[Piece] = []
    own = _step_result(step)
    if own or step.reward is not None:
        text = f"This step's result: {own or '(none recorded)'}"
        if step.reward is not None:
            text += f" (reward {number(step.reward)})"
        pieces.append(Piece(text, 0, f"step:{step.index}"))
    last = min(len(steps) - 1, position + horizon)
    for j in range(position + 1, last + 1):
        s = steps[j]
        lines = [f"Step {s.index} (+{j - position}): observation: {clip(s.observation, OBSERVATION_CHARS)}"]
        lines.append(f"  action: {clip(action_text(s.action), ACTION_CHARS)}")
        if res := _step_result(s):
            lines.append(f"  result: {res}")
        if s.reward is not None:
            lines.append(f"  reward: {number(s.reward)}")
        pieces.append(Piece("\n".join(lines), 1 + j - position, f"step:{s.index}"))
    ended_within = len(steps) - 1 <= position + horizon
    if ended_within and episode.outcome is not None:
        pieces.append(Piece(f"Outcome: {outcome_text(episode.outcome)}", 1, "outcome"))
    elif ended_within:
        pieces.append(Piece("The attempt had not ended (no outcome recorded).", 1))
    else:
        pieces.append(Piece(f"The attempt went on after step {steps[last].index}.", 1 + horizon))
    if not any(p.item_id for p in pieces):
        return NotApplicable("nothing is known yet of what followed this step")
    return Draft("hindsight", "events", tuple(pieces), {"horizon": str(horizon)})


# -- evidence card ------------------------------------------------------------------


def evidence_card_draft(card_id: str, card_text: str) -> Draft:
    """The card line by line (the budget keeps the first lines: task, counts, what worked)."""
    lines = [line for line in card_text.splitlines() if line.strip()]
    return Draft("evidence_card", "card", tuple(Piece(line, i, card_id) for i, line in enumerate(lines)))


# -- reflection ---------------------------------------------------------------------


def reflection_draft(episode: Episode) -> Draft | NotApplicable:
    """A failed attempt as material to reflect on: the task, the failure reason, the
    steps flagged as causing the failure with their results (the last step when
    none is flagged), the outcome."""
    outcome = episode.outcome
    if outcome is None:
        return NotApplicable("the trajectory has no outcome: only a failed attempt is reflected on")
    if outcome.success is not False:
        return NotApplicable("the trajectory did not fail: only a failed attempt is reflected on")
    flagged = [s for s in episode.steps if s.caused_failure]
    note = ""
    if not flagged and episode.steps and not episode.steps[-1].truncated:
        flagged, note = [episode.steps[-1]], " (no step was flagged; the last one ended the attempt)"
    pieces = []
    for rank, s in enumerate(flagged):
        text = (
            f"- Step {s.index}{note}: in state '{clip(s.observation, OBSERVATION_CHARS)}', "
            f"the action '{clip(action_text(s.action), ACTION_CHARS)}' led to: {_step_result(s) or '(no result)'}"
        )
        pieces.append(Piece(text, rank, f"step:{s.index}"))
    values = {
        "task": clip(episode.task, 2 * OBSERVATION_CHARS),
        "failure_reason": clip(outcome.failure_reason, RESULT_CHARS) if outcome.failure_reason else "(not recorded)",
        "outcome": outcome_text(outcome),
    }
    return Draft("reflection", "failed_steps", tuple(pieces), values)


# -- attempt summary ----------------------------------------------------------------


def _distinct(values: Sequence[str]) -> list[str]:
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)


def attempt_lines(attempt: Episode) -> str:
    """One earlier attempt: what it established (steps with positive reward, the
    outcome when it succeeded), where it failed (the failure reason, the steps
    flagged as causing it), what it planned (its distinct internal states)."""
    steps = f"{len(attempt.steps)} steps"
    label = (
        f"Attempt {attempt.attempt} ({attempt.id}, {steps})" if attempt.attempt else f"Attempt {attempt.id} ({steps})"
    )
    head = f"- {label}: {outcome_text(attempt.outcome)}"
    lines = [head]
    established = [
        f"step {s.index} '{clip(action_text(s.action), ACTION_CHARS)}' -> {_step_result(s) or '(no result)'} "
        f"(reward {number(s.reward)})"
        for s in attempt.steps
        if s.reward is not None and s.reward > 0
    ][:ATTEMPT_LINES]
    if attempt.outcome is not None and attempt.outcome.success:
        established.append("the task was completed")
    if established:
        lines.append("  Established: " + "; ".join(established))
    failed = []
    if attempt.outcome is not None and attempt.outcome.failure_reason:
        failed.append(clip(attempt.outcome.failure_reason, RESULT_CHARS))
    failed += [
        f"step {s.index} '{clip(action_text(s.action), ACTION_CHARS)}' -> {_step_result(s) or '(no result)'}"
        for s in attempt.steps
        if s.caused_failure
    ][:ATTEMPT_LINES]
    if failed:
        lines.append("  Failed at: " + "; ".join(failed))
    planned = _distinct([clip(s.internal_state, RESULT_CHARS) for s in attempt.steps if s.internal_state])
    if planned:
        lines.append("  Planned: " + "; ".join(planned[:ATTEMPT_LINES]))
    return "\n".join(lines)


def attempt_summary_draft(attempts: Sequence[Episode]) -> Draft | NotApplicable:
    """Earlier attempts, newest first; the budget keeps the newest."""
    if not attempts:
        return NotApplicable("no earlier attempt at this task (after the leakage guards)")
    pieces = tuple(Piece(attempt_lines(a), i, a.id) for i, a in enumerate(attempts))
    return Draft("attempt_summary", "attempts", pieces)
