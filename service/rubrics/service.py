"""Rubric rewards: create and read rubrics (reflections of kind `rubric`), and score
trajectories with them — stored ones (live or under a snapshot) or inline ones, one
or a batch (a rollout group).

One short read loads the rubric and the stored trajectories with their steps; the
session is closed before any LLM call. Rule criteria are decided by the pure rule
engine (service/rubrics/checks.py), judged criteria by the process's `RubricJudge`
(an LLM through reflectors/llm_client, built by the container), all of a batch's
judge calls at once; scoring is service/rubrics/scores.py.

With no LLM configured, a judged criterion is a 503 naming it (`criteria[i]`, rule
`no_llm`) unless the request says `skip_judged`: then it is scored as method
`skipped` (score null, out of the reward's sums). A trainer's reward must never be
silently computed from part of its rubric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput, NotFound, Unavailable
from domain.jobs import REFLECTION_EMBED
from domain.reflections import ReflectionDraft
from service.auth import Permission, Principal
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.rubrics import repository as repo
from service.rubrics.capabilities import CapabilityService
from service.rubrics.checks import MISSING, Episode, StepView, label_number
from service.rubrics.content import (
    KIND,
    Criterion,
    label_text,
    needs_label,
    parse_criteria,
    reads_label_as_number,
    rubric_text,
    stage_name,
)
from service.rubrics.schemas import (
    CriterionCreate,
    CriterionRead,
    CriterionScoreRead,
    RubricCreate,
    RubricRead,
    ScoreBatchRead,
    ScoreBatchRequest,
    ScoreItem,
    ScoreRead,
    ScoreRequest,
    StageScoreRead,
)
from service.rubrics.scores import RubricJudge, RubricScore, Verdict, judge_tasks, score_episode
from service.snapshots.service import SnapshotService
from service.trajectories.schemas import TrajectoryCreate
from store import reflections as reflections_repo
from store import trajectory_reader as reader
from store.database import Database

API_REFLECTOR = "api"  # the `reflector` of a rubric created through POST …/rubrics
SKIPPED = "judged by an LLM; skipped (skip_judged, and no LLM is configured)"


@dataclass(frozen=True)
class ItemSpec:
    """One trajectory to score, with the field names its errors use."""

    trajectory_id: str | None
    trajectory: TrajectoryCreate | None
    final_answer: Any = None
    label: Any = MISSING
    trajectory_field: str = "trajectory_id"
    label_field: str = "label"
    inline_field: str = "trajectory"
    final_answer_field: str = "final_answer"


@dataclass(frozen=True)
class Scored:
    """A rubric and its scores of the items, in order."""

    rubric: repo.RubricRecord
    scores: list[RubricScore]
    trajectory_ids: list[str | None]


def _criteria_content(criteria: Sequence[CriterionCreate]) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json", exclude_none=True) for c in criteria]


def criterion_read(c: Criterion, stored: Any) -> CriterionRead:
    check = stored.get("check") if isinstance(stored, dict) else None
    return CriterionRead(
        id=c.id, text=c.text, weight=c.weight, check=check, stage=c.stage, method="llm" if c.judged else "rule"
    )


def _score_read(rubric: repo.RubricRecord, trajectory_id: str | None, score: RubricScore) -> ScoreRead:
    def read(s: Any) -> CriterionScoreRead:
        return CriterionScoreRead(
            id=s.id, score=s.score, weight=s.weight, method=s.method, rationale=s.rationale, stage=s.stage
        )

    return ScoreRead(
        rubric_id=rubric.id,
        rubric_version=rubric.version,
        trajectory_id=trajectory_id,
        reward=score.reward,
        criteria=[read(s) for s in score.criteria],
        stages=[
            StageScoreRead(
                stage=st.stage, steps=list(st.steps), reward=st.reward, criteria=[read(s) for s in st.criteria]
            )
            for st in score.stages
        ],
    )


class RubricService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        snapshots: SnapshotService,
        checker: LimitChecker,
        judge: RubricJudge | None,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.snapshots = snapshots
        self.checker = checker
        self.judge = judge
        self.capabilities = CapabilityService(db, namespaces)

    # -- rubrics ------------------------------------------------------------------

    def _read(self, ns: str, rubric: repo.RubricRecord) -> RubricRead:
        raw = rubric.content.get("criteria") if isinstance(rubric.content, dict) else None
        criteria = parse_criteria(raw)
        name = rubric.content.get("name") or rubric.content.get("task") or rubric.task or rubric.id
        return RubricRead(
            id=rubric.id,
            namespace=ns,
            name=str(name),
            status=rubric.status,
            version=rubric.version,
            criteria=[criterion_read(c, stored) for c, stored in zip(criteria, raw or [], strict=True)],
            text=rubric.text,
            task=rubric.task,
            environment=rubric.environment,
            reflector=rubric.reflector,
            created_at=rubric.created_at,
            updated_at=rubric.updated_at,
        )

    def create(self, principal: Principal, ns: str, body: RubricCreate) -> tuple[RubricRead, bool]:
        """Returns (rubric, created). The same id and body again is a replay; a
        different body under that id (or another reflection's id) is a 409."""
        principal.require(Permission.REWARDS, ns)
        raw = _criteria_content(body.criteria)
        criteria = parse_criteria(raw)
        content = {"name": body.name, "criteria": raw, "text": rubric_text(body.name, criteria)}
        actor = f"key:{principal.key_id}"

        def work(session: Session) -> tuple[RubricRead, bool]:
            self.namespaces.require(session, ns)
            row = reflections_repo.read_reflection(session, ns, body.id, for_update=True)
            created = row is None
            if row is not None:
                if (row.kind, row.content, row.task, row.environment) != (KIND, content, body.task, body.environment):
                    raise Conflict(
                        f"reflection {body.id!r} already exists with a different body",
                        field="id",
                        rule="idempotent_replay",
                    )
            else:
                if self.namespaces.is_frozen(session, ns):
                    raise Conflict(
                        f"namespace {ns!r} is frozen for evaluation: no rubric can be added until it is thawed",
                        field="namespace",
                        rule="namespace_frozen",
                    )
                draft = ReflectionDraft(
                    namespace=ns,
                    id=body.id,
                    kind=KIND,
                    content=content,
                    text=content["text"],
                    reflector=API_REFLECTOR,
                    reflector_version="1",
                    status=body.status,
                    environment=body.environment,
                    task=body.task,
                )
                row = reflections_repo.create_reflection(session, draft.values(), actor=actor)
                if body.task is not None:  # matched by its task in retrieval, like an evidence card
                    REFLECTION_EMBED.enqueue(
                        session, ns, {"reflection_pk": row.pk, "version": row.version}, row.pk, row.version
                    )
            record = repo.read_rubric(session, ns, None, body.id)
            assert record is not None
            return self._read(ns, record), created

        return self.db.run_write(work)

    def get(self, principal: Principal, ns: str, id: str) -> RubricRead:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            rubric = self.namespaces.get_or_404(
                session, ns, "rubric", id, lambda: repo.read_rubric(session, ns, None, id)
            )
            return self._read(ns, rubric)

    # -- scoring ------------------------------------------------------------------

    def score(self, principal: Principal, ns: str, id: str, body: ScoreRequest) -> ScoreRead:
        principal.require(Permission.REWARDS, ns)
        scored = self.score_items(ns, id, [_spec(body, "")], snapshot=body.snapshot, skip_judged=body.skip_judged)
        return _score_read(scored.rubric, scored.trajectory_ids[0], scored.scores[0])

    def score_batch(self, principal: Principal, ns: str, id: str, body: ScoreBatchRequest) -> ScoreBatchRead:
        principal.require(Permission.REWARDS, ns)
        self.checker.batch_size(len(body.items), "items", self.checker.limits.max_batch_trajectories)
        specs = [_spec(item, f"items[{i}].") for i, item in enumerate(body.items)]
        scored = self.score_items(ns, id, specs, snapshot=body.snapshot, skip_judged=body.skip_judged)
        items = [
            _score_read(scored.rubric, tid, s) for tid, s in zip(scored.trajectory_ids, scored.scores, strict=True)
        ]
        rewards = [i.reward for i in items if i.reward is not None]
        return ScoreBatchRead(
            rubric_id=scored.rubric.id,
            rubric_version=scored.rubric.version,
            items=items,
            reward_mean=sum(rewards) / len(rewards) if rewards else None,
        )

    def score_items(
        self, ns: str, rubric_id: str, items: Sequence[ItemSpec], *, snapshot: str | None, skip_judged: bool
    ) -> Scored:
        """Score each item with the rubric (what every scoring route runs; the caller
        checked the permission, or the capability)."""
        self._check_inline(items)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            snap = self.snapshots.resolve(session, ns, snapshot, field="snapshot")
            spk = snap.pk if snap else None
            where = f"snapshot {snap.id!r}" if snap else f"namespace {ns!r}"
            rubric = repo.read_rubric(session, ns, spk, rubric_id)
            if rubric is None:
                raise NotFound(f"rubric {rubric_id!r} not found in {where}", field="id")
            records = reader.read_trajectory_records(
                session, ns, spk, [i.trajectory_id for i in items if i.trajectory_id], repo.TrajectoryRecord
            )
            for item in items:
                if item.trajectory_id is not None and item.trajectory_id not in records:
                    raise NotFound(
                        f"trajectory {item.trajectory_id!r} not found in {where}", field=item.trajectory_field
                    )
            steps = reader.read_step_records(session, ns, spk, [r.pk for r in records.values()], repo.StepRecord)
        criteria = parse_criteria(rubric.content.get("criteria") if isinstance(rubric.content, dict) else None)
        episodes = [_episode(item, records, steps) for item in items]
        reads_label = needs_label(criteria)
        if reads_label is not None:
            for item, episode in zip(items, episodes, strict=True):
                if episode.label is MISSING:
                    raise InvalidInput(
                        f"criterion {reads_label.id!r} of rubric {rubric_id!r} reads {{{{label}}}}: "
                        f"give {item.label_field} (the ground truth)",
                        field=item.label_field,
                        rule="label_required",
                    )
        numeric = reads_label_as_number(criteria)
        if numeric is not None:
            for item, episode in zip(items, episodes, strict=True):
                if label_number(episode.label) is None:
                    shown = label_text(episode.label)
                    shown = shown if len(shown) <= 80 else shown[:80] + "…"
                    raise InvalidInput(
                        f"criterion {numeric.id!r} of rubric {rubric_id!r} compares a number with {{{{label}}}}, "
                        f"and {item.label_field} {shown!r} is not one: give a number, a numeric string, or a text "
                        "stating its answer (\\boxed{72}, '#### 72', 'The answer is 72', 'Final answer: 72')",
                        field=item.label_field,
                        rule="label_not_numeric",
                    )
        verdicts = self._judge(ns, criteria, episodes, skip_judged)
        scores = [score_episode(criteria, e, v, skipped=SKIPPED) for e, v in zip(episodes, verdicts, strict=True)]
        ids = [item.trajectory_id or (item.trajectory.id if item.trajectory else None) for item in items]
        return Scored(rubric, scores, ids)

    def _check_inline(self, items: Sequence[ItemSpec]) -> None:
        total = 0
        for item in items:
            if item.trajectory is not None:
                self.checker.trajectory(item.trajectory, item.inline_field)
                total += len(item.trajectory.steps)
            if isinstance(item.final_answer, dict):
                self.checker.json(item.final_answer, item.final_answer_field)
        self.checker.step_count(total, "steps")

    def _judge(
        self, ns: str, criteria: Sequence[Criterion], episodes: Sequence[Episode], skip_judged: bool
    ) -> list[dict[str | None, dict[str, Verdict]]]:
        plans = [judge_tasks(criteria, e) for e in episodes]
        flat = [task for plan in plans for task in plan]
        out: list[dict[str | None, dict[str, Verdict]]] = [{} for _ in episodes]
        if not flat:
            return out
        if self.judge is None:
            if skip_judged:
                return out
            first = flat[0].criteria[0]
            raise Unavailable(
                f"criterion {first.id!r} is judged by an LLM and no LLM is configured (set REFLEXA_LLM__BASE_URL "
                "and REFLEXA_LLM__MODEL), or pass skip_judged to score the rule criteria alone",
                field=first.field,
                rule="no_llm",
            )
        answers = iter(self.judge.judge(ns, flat))
        for i, plan in enumerate(plans):
            for task in plan:
                out[i][task.stage] = next(answers)
        return out


def _spec(item: ScoreItem, prefix: str) -> ItemSpec:
    return ItemSpec(
        trajectory_id=item.trajectory_id,
        trajectory=item.trajectory,
        final_answer=item.final_answer,
        label=MISSING if item.label is None else item.label,
        trajectory_field=f"{prefix}trajectory_id",
        label_field=f"{prefix}label",
        inline_field=f"{prefix}trajectory",
        final_answer_field=f"{prefix}final_answer",
    )


def _label(metadata: Any) -> Any:
    if isinstance(metadata, dict) and metadata.get("label") is not None:
        return metadata["label"]
    return MISSING


def _episode(
    item: ItemSpec, records: dict[str, repo.TrajectoryRecord], steps: dict[int, list[repo.StepRecord]]
) -> Episode:
    if item.trajectory is not None:
        t = item.trajectory
        views = tuple(
            StepView(
                index=s.index if s.index is not None else j,
                observation=s.state.observation,
                action=s.action,
                result=s.result,
                stage=stage_name((s.metadata or {}).get("stage")),
            )
            for j, s in enumerate(t.steps)
        )
        task, metadata = t.task, t.metadata
    else:
        record = records[item.trajectory_id or ""]
        views = tuple(
            StepView(
                index=s.index,
                observation=s.observation,
                action=s.action,
                result=s.result,
                stage=stage_name(s.metadata.get("stage") if isinstance(s.metadata, dict) else None),
            )
            for s in steps[record.pk]
        )
        task, metadata = record.task, record.metadata
    label = item.label if item.label is not MISSING else _label(metadata)
    return Episode(task=task, steps=views, final_answer=item.final_answer, label=label)
