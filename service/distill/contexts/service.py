"""Teacher contexts for on-policy distillation: per step, the plain context (task +
the history the agent saw) and each requested teacher context (the plain one with
a privileged block in the system message), with the leakage guards applied and
reported.

One short read loads everything (trajectories and steps under the snapshot view,
rollout-group members, evidence cards, earlier attempts); the session is closed
before the one batched retrieval for every memory step; a second short read gets
the full sources of the items retrieved (the defensive leakage check); the rest is
pure (service.distill.contexts.builders, service.distill.contexts.render).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from domain.contexts import plain as plain_context
from domain.contexts.templates import ContextTemplate, TemplateError, available, load_template
from domain.errors import InvalidInput, NotFound, Unavailable
from domain.evidence_cards import build_card
from domain.settings import NamespaceSettings, parse_settings
from service.auth import Permission, Principal
from service.distill import repository as repo
from service.distill.contexts import builders, render
from service.distill.contexts.builders import Episode, NotApplicable
from service.distill.contexts.schemas import (
    DEFAULT_ATTEMPTS,
    DEFAULT_MAX_CHARS,
    DEFAULT_MEMORY_K,
    DEFAULT_MEMORY_KINDS,
    AppliedBudget,
    ChatMessage,
    ContextsRequest,
    ContextsResponse,
    ContextTrajectory,
    Fade,
    HistoryParts,
    LeakageOptions,
    LeakageRead,
    PlainContext,
    StepContexts,
    TeacherContext,
    TeacherSpec,
    TrajectoryContexts,
)
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.namespaces.stored import read_settings
from service.retrieval.schemas import RetrievedItem, RetrieveFilters, RetrieveRequest
from service.retrieval.service import RetrievalService
from service.snapshots.service import SnapshotService
from service.tasks.service import TaskService, TaskStats
from service.trajectories.schemas import State
from store import trajectory_reader as reader
from store.database import Database
from store.snapshots import SnapshotRef

MAX_TOKENS_CHARS = 200_000  # the character cap of a block budgeted by tokens alone
FLOOR_SLACK = 1e-9  # ⌊limit · share⌋ forgives float error (0.7 · 10 is 7.000000000000001)
# Kinds whose guarded evidence is subtracted rather than the item hidden: a merged
# exemplar's statistics are per evidence row, so they are recomputed without it.
SUBTRACTED_KINDS = frozenset({"exemplar"})
_TASK_SCOPED = frozenset({"evidence_card", "attempt_summary"})
_TRAJECTORY_SCOPED = frozenset({"hindsight", "reflection"})


@dataclass
class _Guards:
    """What one episode's leakage guards exclude."""

    own: frozenset[str]  # the trajectory's own id (empty: an inline one without id)
    siblings: frozenset[str]  # the other members of its rollout group
    group_id: str | None
    task_hash: str
    task: str
    options: LeakageOptions

    def excluded_ids(self) -> list[str]:
        out = set()
        if not self.options.allow_same_trajectory:
            out |= self.own
        if not self.options.allow_same_group:
            out |= self.siblings
        return sorted(out)

    def split(self, sources: Sequence[repo.Source], *, task_guard: bool) -> tuple[list[repo.Source], list[repo.Source]]:
        """(the sources that may be shown, those a guard excludes)."""
        kept: list[repo.Source] = []
        excluded: list[repo.Source] = []
        for source in sources:
            (excluded if self.leak(source, task_guard=task_guard) else kept).append(source)
        return kept, excluded

    def leak(self, source: repo.Source, *, task_guard: bool) -> str | None:
        """Why evidence from this source may not be shown (None: it may)."""
        o = self.options
        own = source.trajectory_id in self.own
        sibling = not own and (
            source.trajectory_id in self.siblings or (self.group_id is not None and source.group_id == self.group_id)
        )
        if own and not o.allow_same_trajectory:
            return "this trajectory"
        if sibling and not o.allow_same_group:
            return "its rollout group"
        if task_guard and not o.allow_same_task and source.task_hash == self.task_hash:
            return "its task"
        return None


@dataclass
class _Loaded:
    """Everything the first read gathered."""

    snapshot: SnapshotRef | None
    settings: NamespaceSettings
    episodes: list[Episode]
    guards: list[_Guards]
    cards: dict[str, repo.CardRecord | None] = field(default_factory=dict)  # task -> card
    # the rollouts a card is rebuilt from when a guard excludes some of its own: by trajectory id
    card_runs: dict[str, tuple[repo.TrajectoryRecord, list[repo.StepRecord]]] = field(default_factory=dict)
    rebuilt_cards: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)  # (card, runs) -> text
    attempts: list[tuple[list[Episode], int]] = field(default_factory=list)  # per episode: attempts, dropped
    task_stats: dict[str, TaskStats] = field(default_factory=dict)  # fade: task hash -> fade.policy_version's


@dataclass
class _Memory:
    items: list[RetrievedItem]
    dropped: int
    subtracted: int = 0  # evidence rows subtracted from merged exemplars


@dataclass
class _At:
    """The step a teacher context is built for."""

    e_i: int  # the trajectory's position in the request
    position: int  # the step's position in the trajectory
    episode: Episode
    guards: _Guards
    plain: PlainContext
    guard: render.ActionGuard  # the step's own action


class DistillService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        snapshots: SnapshotService,
        retrieval: RetrievalService,
        checker: LimitChecker,
        tasks: TaskService,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.snapshots = snapshots
        self.retrieval = retrieval
        self.checker = checker
        self.tasks = tasks
        self._tokenizers: dict[tuple[str, int], render.HFTokenCounter] = {}
        self._tokenizer_lock = threading.Lock()

    # -- public -------------------------------------------------------------------

    def contexts(
        self, principal: Principal, ns: str, body: ContextsRequest, *, permission: Permission = Permission.DISTILL
    ) -> ContextsResponse:
        """The route. Other callers (a dataset export building SFT prompts) pass the
        permission their own route checks."""
        principal.require(permission, ns)
        template = self._template(body.template)
        self._check(body)
        loaded = self._load(ns, body)
        tokens = self._tokenizer(loaded.settings)
        for i, spec in enumerate(body.teachers):
            if spec.max_tokens is not None and tokens is None:
                raise InvalidInput(
                    f"teachers[{i}].max_tokens needs a tokenizer: set the namespace setting distill.tokenizer_file",
                    field=f"teachers[{i}].max_tokens",
                    rule="needs_tokenizer",
                )
        positions = [self._positions(e, body.steps) for e in loaded.episodes]
        memory = self._memory(principal, ns, body, loaded, positions)
        out = []
        for e_i, (episode, guards) in enumerate(zip(loaded.episodes, loaded.guards, strict=True)):
            history = plain_context.PlainHistory(
                template, episode.task, [builders.history_step(s) for s in episode.steps]
            )
            steps = []
            for position in positions[e_i]:
                messages, omitted = history.messages(position, body.history_max_chars, body.history_steps)
                plain_text = plain_context.transcript(template, messages)
                plain = PlainContext(
                    text=plain_text,
                    messages=_chat(messages),
                    omitted_steps=omitted,
                    tokens=tokens.count(plain_text) if tokens else None,
                )
                at = _At(e_i, position, episode, guards, plain, render.guard_for(episode.steps[position].action))
                teachers = {
                    spec.key: self._teacher(template, spec, t_i, at, loaded, memory, tokens, body.fade)
                    for t_i, spec in enumerate(body.teachers)
                }
                steps.append(StepContexts(index=episode.steps[position].index, plain=plain, teachers=teachers))
            out.append(TrajectoryContexts(id=episode.id, steps=steps))
            if "parts" in body.include and steps:
                _parts(out[-1], history, positions[e_i])
        _keep_only(out, set(body.include))
        return ContextsResponse(
            snapshot=loaded.snapshot.id if loaded.snapshot else None, template_version=template.id, trajectories=out
        )

    def contexts_for(
        self,
        principal: Principal,
        ns: str,
        trajectory_ids: Sequence[str],
        teachers: Sequence[TeacherSpec],
        *,
        snapshot: str | None = None,
        template: str = "default",
        leakage: LeakageOptions | None = None,
        history_max_chars: int = plain_context.DEFAULT_HISTORY_MAX_CHARS,
        history_steps: int | None = None,
        steps: Sequence[int] | None = None,
        permission: Permission = Permission.DISTILL,
    ) -> ContextsResponse:
        """Contexts for stored trajectories, for code that is not the route (the
        dataset export): the same answer the route gives for this body."""
        body = ContextsRequest(
            snapshot=snapshot,
            template=template,
            trajectories=[ContextTrajectory(id=id_) for id_ in trajectory_ids],
            teachers=list(teachers),
            leakage=leakage or LeakageOptions(),
            history_max_chars=history_max_chars,
            history_steps=history_steps,
            steps=None if steps is None else list(steps),
        )
        return self.contexts(principal, ns, body, permission=permission)

    # -- checks ---------------------------------------------------------------------

    @staticmethod
    def _template(name: str) -> ContextTemplate:
        try:
            return load_template(name)
        except KeyError:
            raise InvalidInput(
                f"template {name!r} does not exist; templates: {', '.join(available())}",
                field="template",
                rule="known_template",
            ) from None
        except TemplateError as exc:  # a shipped template is broken: the server's fault, said plainly
            raise Unavailable(str(exc), field="template", rule="template_files") from exc

    def _check(self, body: ContextsRequest) -> None:
        seen: dict[str, int] = {}
        for i, spec in enumerate(body.teachers):
            if spec.key in seen:
                raise InvalidInput(
                    f"teachers[{i}] is named {spec.key!r} like teachers[{seen[spec.key]}]; give each a distinct name",
                    field=f"teachers[{i}].name",
                    rule="unique_name",
                )
            seen[spec.key] = i
            for option, kinds in (
                ("horizon", {"hindsight"}),
                ("kinds", {"memory"}),
                ("k", {"memory", "attempt_summary"}),
            ):
                if getattr(spec, option) is not None and spec.kind not in kinds:
                    raise InvalidInput(
                        f"teachers[{i}].{option} applies to {' and '.join(sorted(kinds))} teachers, not {spec.kind}",
                        field=f"teachers[{i}].{option}",
                        rule="not_for_kind",
                    )
        if body.fade is not None and body.fade.teachers is not None:
            for i, name in enumerate(body.fade.teachers):
                if name not in seen:
                    raise InvalidInput(
                        f"fade.teachers[{i}] is {name!r}, which names no teacher of this request "
                        f"(teachers: {', '.join(seen) or 'none'})",
                        field=f"fade.teachers[{i}]",
                        rule="known_teacher",
                    )
        self.checker.batch_size(len(body.trajectories), "trajectories", self.checker.limits.max_batch_trajectories)
        inline_steps = 0
        for i, t in enumerate(body.trajectories):
            if t.stored:
                continue
            self.checker.json(t.metadata, f"trajectories[{i}].metadata")
            if t.outcome is not None:
                self.checker.json(t.outcome.details, f"trajectories[{i}].outcome.details")
            for j, s in enumerate(t.steps):
                self.checker.step(s, f"trajectories[{i}].steps[{j}]")
                if s.index is not None and s.index != j:
                    raise InvalidInput(
                        f"trajectories[{i}].steps[{j}].index is {s.index}; inline steps are numbered from 0 in order",
                        field=f"trajectories[{i}].steps[{j}].index",
                        rule="consecutive",
                    )
            inline_steps += len(t.steps)
        self.checker.step_count(inline_steps, "trajectories[*].steps")

    def _context_steps(self, n: int) -> None:
        most = self.checker.limits.max_context_steps
        if n > most:
            raise InvalidInput(
                f"trajectories ask for {n} step contexts; at most {most} per request (split it, or pass `steps`)",
                field="trajectories",
                rule="max_context_steps",
            )

    @staticmethod
    def _positions(episode: Episode, wanted: Sequence[int] | None) -> list[int]:
        if wanted is None:
            return list(range(len(episode.steps)))
        keep = set(wanted)
        return [i for i, s in enumerate(episode.steps) if s.index in keep]

    # -- the first read ---------------------------------------------------------------

    def _load(self, ns: str, body: ContextsRequest) -> _Loaded:
        kinds = {spec.kind for spec in body.teachers}
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            snap = self.snapshots.resolve(session, ns, body.snapshot, field="snapshot")
            spk = snap.pk if snap else None
            settings = parse_settings(snap.settings) if snap else read_settings(session, ns)
            stored_ids = [t.id for t in body.trajectories if t.stored and t.id is not None]
            records = reader.read_trajectory_records(session, ns, spk, stored_ids, repo.TrajectoryRecord)
            wanted = None if body.steps is None else set(body.steps)
            total = 0
            for i, t in enumerate(body.trajectories):
                if t.stored:
                    rec = records.get(t.id or "")
                    if rec is None:
                        where = f"snapshot {snap.id!r}" if snap else f"namespace {ns!r}"
                        raise NotFound(f"trajectory {t.id!r} not found in {where}", field=f"trajectories[{i}].id")
                    n = rec.step_count
                else:
                    n = len(t.steps)
                total += n if wanted is None else sum(1 for index in wanted if index < n)
            self._context_steps(total)
            steps = reader.read_step_records(
                session, ns, spk, sorted({r.pk for r in records.values()}), repo.StepRecord
            )
            episodes = [
                builders.stored_episode(records[t.id or ""], steps) if t.stored else builders.inline_episode(t)
                for t in body.trajectories
            ]
            groups = sorted({e.group_id for e in episodes if e.group_id})
            members = repo.list_group_members(session, ns, spk, groups)
            for e in episodes:  # an inline rollout group's members are in the request
                if e.group_id and e.id and e.id not in members[e.group_id]:
                    members[e.group_id].append(e.id)
            guards = [
                _Guards(
                    own=frozenset({e.id} if e.id else ()),
                    siblings=frozenset(members.get(e.group_id, ()) if e.group_id else ()) - {e.id},
                    group_id=e.group_id,
                    task_hash=e.task_hash,
                    task=e.task,
                    options=body.leakage,
                )
                for e in episodes
            ]
            loaded = _Loaded(snapshot=snap, settings=settings, episodes=episodes, guards=guards)
            if body.fade is not None:
                hashes = [e.task_hash for e in episodes]
                loaded.task_stats = self.tasks.stats_for_policy(session, ns, spk, hashes, body.fade.policy_version)
            if "evidence_card" in kinds:
                loaded.cards = repo.read_evidence_cards(session, ns, spk, sorted({e.task for e in episodes}))
                loaded.card_runs = self._card_runs(session, ns, spk, loaded)
            if "attempt_summary" in kinds:
                most = max((s.k or DEFAULT_ATTEMPTS) for s in body.teachers if s.kind == "attempt_summary")
                loaded.attempts = [
                    self._attempts(session, ns, spk, e, g, most) for e, g in zip(episodes, guards, strict=True)
                ]
        return loaded

    @staticmethod
    def _card_runs(
        session: Session, ns: str, spk: int | None, loaded: _Loaded
    ) -> dict[str, tuple[repo.TrajectoryRecord, list[repo.StepRecord]]]:
        """The rollouts (trajectory and steps, under the snapshot) that cards are
        rebuilt from: for every episode whose guards exclude some of its task's card's
        rollouts, the ones left; all of them in two reads."""
        wanted: set[str] = set()
        for episode, guards in zip(loaded.episodes, loaded.guards, strict=True):
            card = loaded.cards.get(episode.task)
            if card is not None:
                kept, excluded = guards.split(card.sources, task_guard=False)
                if excluded:
                    wanted |= {s.trajectory_id for s in kept}
        if not wanted:
            return {}
        records = reader.read_trajectory_records(session, ns, spk, sorted(wanted), repo.TrajectoryRecord)
        steps = reader.read_step_records(session, ns, spk, sorted(r.pk for r in records.values()), repo.StepRecord)
        return {id_: (rec, steps.get(rec.pk, [])) for id_, rec in records.items()}

    @staticmethod
    def _attempts(
        session: Session, ns: str, spk: int | None, episode: Episode, guards: _Guards, most: int
    ) -> tuple[list[Episode], int]:
        """Earlier attempts at the episode's task, newest first: its parent chain, else
        the task's closed trajectories stored before it; without this trajectory and
        its group (unless allowed). Returns them and how many the guards dropped."""
        chain: list[repo.TrajectoryRecord] = []
        dropped = 0
        seen = set(guards.own)
        parent = episode.parent_trajectory_id
        while parent and parent not in seen and len(chain) < most:
            seen.add(parent)
            rec = reader.read_trajectory_records(session, ns, spk, [parent], repo.TrajectoryRecord).get(parent)
            if rec is None:
                break
            source = repo.Source(rec.id, rec.group_id, rec.task_hash)
            if guards.leak(source, task_guard=False) is None:
                chain.append(rec)
            else:
                dropped += 1
            parent = rec.parent_trajectory_id
        if not chain:
            o = guards.options
            exclude = set(guards.own if not o.allow_same_trajectory else ())
            exclude |= set(guards.siblings if not o.allow_same_group else ())
            chain = repo.list_earlier_attempts(
                session,
                ns,
                spk,
                episode.task_hash,
                before_pk=episode.pk,
                exclude_ids=sorted(exclude),
                exclude_group_ids=[episode.group_id] if episode.group_id and not o.allow_same_group else [],
                limit=most,
            )
        steps = reader.read_step_records(session, ns, spk, [r.pk for r in chain], repo.StepRecord)
        return [builders.stored_episode(r, steps) for r in chain], dropped

    # -- memory: one batched retrieval ---------------------------------------------

    def _memory(
        self,
        principal: Principal,
        ns: str,
        body: ContextsRequest,
        loaded: _Loaded,
        positions: list[list[int]],
    ) -> dict[tuple[int, int, int], _Memory]:
        """(teacher, episode, position) -> the items to show. One retrieve_many for every
        step of every memory teacher (one encoder call), not logged: a trainer's read
        earns no credit."""
        keys: list[tuple[int, int, int]] = []
        requests: list[RetrieveRequest] = []
        for t_i, spec in enumerate(body.teachers):
            if spec.kind != "memory":
                continue
            for e_i, (episode, guards) in enumerate(zip(loaded.episodes, loaded.guards, strict=True)):
                filters = RetrieveFilters(
                    exclude_trajectory_ids=guards.excluded_ids(),
                    exclude_tasks=[] if body.leakage.allow_same_task else [episode.task],
                )
                for position in positions[e_i]:
                    s = episode.steps[position]
                    keys.append((t_i, e_i, position))
                    requests.append(
                        RetrieveRequest(
                            state=State(observation=s.observation, data=s.state_data),
                            internal_state=s.internal_state,
                            task=episode.task,
                            kinds=list(spec.kinds or DEFAULT_MEMORY_KINDS),
                            k=spec.k or DEFAULT_MEMORY_K,
                            filters=filters,
                            snapshot=body.snapshot,
                        )
                    )
        if not requests:
            return {}
        results = self.retrieval.retrieve_many(
            principal, ns, requests, field="trajectories", log=False, partial_kinds=SUBTRACTED_KINDS
        )
        ids = sorted({item.id for r in results for item in r.items})
        spk = loaded.snapshot.pk if loaded.snapshot else None
        splits = []
        with self.db.read() as session:  # every served item's evidence rows, in one query
            sources = repo.list_reflection_sources(session, ns, spk, ids)
            for key, result in zip(keys, results, strict=True):
                guards = loaded.guards[key[1]]
                splits.append(
                    [(item, *guards.split(sources.get(item.id, ()), task_guard=True)) for item in result.items]
                )
            # a subtracted exemplar shows the result of an occurrence left, not the
            # first one's (which may be guarded): those steps, in one more read
            origins = {
                kept[0].trajectory_pk
                for split in splits
                for item, kept, excluded in split
                if excluded and kept and item.kind in SUBTRACTED_KINDS and kept[0].trajectory_pk is not None
            }
            steps = reader.read_step_records(session, ns, spk, sorted(origins), repo.StepRecord) if origins else {}
        out = {}
        for key, split in zip(keys, splits, strict=True):
            memory = _Memory([], 0)
            for item, kept, excluded in split:
                if not excluded:
                    memory.items.append(item)
                elif item.kind in SUBTRACTED_KINDS and kept:
                    origin = kept[0]
                    step = next(
                        (s for s in steps.get(origin.trajectory_pk or -1, ()) if s.index == origin.step_start), None
                    )
                    memory.items.append(_subtract(item, kept, excluded, step))
                    memory.subtracted += len(excluded)
                else:  # hidden whole (normally the retrieval's filters did it already)
                    memory.dropped += 1
            out[key] = memory
        return out

    # -- one teacher context ----------------------------------------------------------

    def _teacher(
        self,
        template: ContextTemplate,
        spec: TeacherSpec,
        t_i: int,
        at: _At,
        loaded: _Loaded,
        memory: dict[tuple[int, int, int], _Memory],
        tokens: render.TokenCounter | None,
        fade: Fade | None = None,
    ) -> TeacherContext:
        episode, guards, plain = at.episode, at.guards, at.plain
        o = guards.options
        leakage: dict[str, Any] = {
            "allow_same_trajectory": o.allow_same_trajectory,
            "allow_same_group": o.allow_same_group,
            "allow_same_task": o.allow_same_task,
            "task_scoped": spec.kind in _TASK_SCOPED,
            "trajectory_scoped": spec.kind in _TRAJECTORY_SCOPED,
        }
        draft: render.Draft | NotApplicable
        if spec.kind == "memory":
            found = memory[(t_i, at.e_i, at.position)]
            leakage.update(
                excluded_trajectories=len(guards.excluded_ids()),
                excluded_tasks=0 if o.allow_same_task else 1,
                dropped_items=found.dropped,
                subtracted_evidence=found.subtracted,
            )
            draft = builders.memory_draft(found.items, list(spec.kinds or DEFAULT_MEMORY_KINDS))
        elif spec.kind == "hindsight":
            draft = builders.hindsight_draft(episode, at.position, spec.horizon or 1)
        elif spec.kind == "reflection":
            draft = builders.reflection_draft(episode)
        elif spec.kind == "evidence_card":
            card = loaded.cards.get(episode.task)
            leakage["excluded_trajectories"] = len(guards.excluded_ids())
            if card is None:
                draft = NotApplicable("the task has no evidence card (cards come from closed rollout groups)")
            else:
                draft = self._card(card, guards, loaded, leakage)
        else:  # attempt_summary
            attempts, dropped = loaded.attempts[at.e_i]
            leakage.update(excluded_trajectories=len(guards.excluded_ids()), dropped_items=dropped)
            draft = builders.attempt_summary_draft(attempts[: spec.k or DEFAULT_ATTEMPTS])
        max_chars = spec.max_chars or (DEFAULT_MAX_CHARS if spec.max_tokens is None else MAX_TOKENS_CHARS)
        max_tokens, max_items, budget = spec.max_tokens, None, None
        if fade is not None and (fade.teachers is None or spec.key in fade.teachers):
            pieces = None if isinstance(draft, NotApplicable) else len(draft.pieces)
            budget = _faded(fade, loaded.task_stats.get(episode.task_hash), max_chars, max_tokens, pieces)
            max_chars, max_tokens, max_items = budget.max_chars, budget.max_tokens, budget.max_items
            if not isinstance(draft, NotApplicable) and (max_items == 0 or max_chars == 0 or max_tokens == 0):
                rate = "n/a" if budget.success_rate is None else f"{budget.success_rate:.2f}"
                draft = NotApplicable(
                    f"faded out: the task's success rate for policy version {fade.policy_version!r} is {rate} "
                    f"over {budget.attempts} attempts (budget share {budget.share:.2f})"
                )
        if isinstance(draft, NotApplicable):
            return TeacherContext(
                text=plain.text,
                messages=plain.messages,
                item_ids=[],
                chars=0,
                tokens=0 if tokens else None,
                leakage=LeakageRead(**leakage),
                applicable=False,
                reason=draft.reason,
                budget=budget,
            )
        block = render.fit(
            template, draft, at.guard, max_chars=max_chars, tokens=tokens, max_tokens=max_tokens, max_items=max_items
        )
        leakage["redacted_actions"] = block.redacted
        system, text = render.with_privileged(template, plain.messages[0].content, plain.text, block.text)
        return TeacherContext(
            text=text,
            messages=[ChatMessage(role="system", content=system), *plain.messages[1:]],
            item_ids=block.item_ids,
            chars=len(block.text),
            item_chars=block.item_chars,
            privileged=block.text,
            omitted_items=block.omitted,
            tokens=block.tokens,
            leakage=LeakageRead(**leakage),
            applicable=True,
            budget=budget,
        )

    @staticmethod
    def _card(
        card: repo.CardRecord, guards: _Guards, loaded: _Loaded, leakage: dict[str, Any]
    ) -> render.Draft | NotApplicable:
        """The task's card for this episode: as stored, or, when it draws on rollouts a
        guard excludes, rebuilt without them by the reflector's own function
        (domain.evidence_cards.build_card); not applicable when nothing is left."""
        kept, excluded = guards.split(card.sources, task_guard=False)
        if not excluded:
            return builders.evidence_card_draft(card.id, card.text)
        leaks = sorted({why for s in excluded if (why := guards.leak(s, task_guard=False))})
        leakage["subtracted_evidence"] = len({s.trajectory_id for s in excluded})
        runs = sorted(
            (loaded.card_runs[id_] for id_ in {s.trajectory_id for s in kept} if id_ in loaded.card_runs),
            key=lambda run: run[0].pk,  # the reflector's order: oldest rollout first
        )
        if not runs:
            leakage["dropped_items"] = 1
            return NotApplicable(
                f"the task's evidence card draws only on {' and '.join(leaks)}: "
                "nothing is left once they are subtracted (leakage guard)"
            )
        key = (card.id, tuple(run[0].id for run in runs))
        text = loaded.rebuilt_cards.get(key)
        if text is None:
            text = loaded.rebuilt_cards[key] = build_card(card.task, runs)["text"]
        return builders.evidence_card_draft(card.id, text)

    # -- tokens -------------------------------------------------------------------------

    def _tokenizer(self, settings: NamespaceSettings) -> render.HFTokenCounter | None:
        """The namespace's tokenizer (loaded once per file version)."""
        path = settings.distill.tokenizer_file
        if path is None:
            return None
        try:
            key = (path, os.stat(path).st_mtime_ns)
            with self._tokenizer_lock:
                counter = self._tokenizers.get(key)
                if counter is None:
                    from tokenizers import Tokenizer  # only namespaces with a tokenizer pay the import

                    counter = render.HFTokenCounter(Tokenizer.from_file(path))
                    self._tokenizers = {key: counter} | {k: v for k, v in self._tokenizers.items() if k[0] != path}
        except Exception as exc:  # a missing or malformed file: the namespace's setting, not the request
            raise Unavailable(
                f"the tokenizer of namespace setting distill.tokenizer_file ({path}) cannot be loaded: {exc}",
                field="settings.distill.tokenizer_file",
                rule="tokenizer_file",
            ) from exc
        return counter


def _chat(messages: Sequence[plain_context.Message]) -> list[ChatMessage]:
    return [ChatMessage(role=m["role"], content=m["content"]) for m in messages]  # type: ignore[arg-type]


def _subtract(
    item: RetrievedItem,
    kept: Sequence[repo.Source],
    excluded: Sequence[repo.Source],
    origin: repo.StepRecord | None,
) -> RetrievedItem:
    """A merged exemplar without the guarded evidence rows: count, success_count,
    failure_count and the mean return_to_go recomputed from the rows left (as the
    store computes them from all of its rows); its result, reward and internal state
    those of `origin`, the first occurrence left (the stored content shows the
    exemplar's first occurrence, which may be a guarded one)."""
    wins = sum(1 for s in kept if s.success is True)
    losses = sum(1 for s in kept if s.success is False)
    values = [s.value for s in kept if s.value is not None]
    content = dict(item.content)
    if origin is not None:
        content.update(result=origin.result, reward=origin.reward, internal_state=origin.internal_state)
    content.update(
        count=len(kept),
        success_count=wins,
        failure_count=losses,
        return_to_go=sum(values) / len(values) if values else None,
        success=None if wins == losses else wins > losses,
    )
    gone = {s.trajectory_id for s in excluded}
    return item.model_copy(
        update={
            "content": content,
            "evidence_count": len(kept),
            "evidence": [e for e in item.evidence if e.trajectory_id not in gone],
        }
    )


def _parts(trajectory: TrajectoryContexts, history: plain_context.PlainHistory, positions: list[int]) -> None:
    """The shared-history form: the turns the steps show, once, from the earliest step
    any window starts at to the last step asked for (a step's index is its position:
    indices run from 0 in order); per step its marker, per teacher its system message."""
    start = min(step.plain.omitted_steps for step in trajectory.steps)
    last = max(positions)
    trajectory.history = HistoryParts(
        system=history.system,
        start=start,
        users=history.users[start : last + 1],
        assistants=history.assistants[start:last],
    )
    for step in trajectory.steps:
        step.plain.marker = history.marker(step.plain.omitted_steps)
        for teacher in step.teachers.values():
            assert teacher.messages is not None  # built before _keep_only
            teacher.system = teacher.messages[0].content


def _keep_only(trajectories: list[TrajectoryContexts], include: set[str]) -> None:
    """Null the renderings the request did not ask for (built anyway: the teacher
    contexts are derived from the plain ones)."""
    for trajectory in trajectories:
        for step in trajectory.steps:
            for context in (step.plain, *step.teachers.values()):
                if "text" not in include:
                    context.text = None
                if "messages" not in include:
                    context.messages = None


def _faded(
    fade: Fade, stats: TaskStats | None, max_chars: int, max_tokens: int | None, pieces: int | None
) -> AppliedBudget:
    """The budget times share = max(floor, 1 − success rate), the full budget below
    min_attempts closed attempts; each limit rounded down (FLOOR_SLACK for float error)."""
    attempts = stats.attempts if stats is not None else 0
    rate = stats.success_rate if stats is not None else None
    share = 1.0 if attempts < fade.min_attempts or rate is None else max(fade.floor, 1.0 - rate)

    def scaled(limit: int) -> int:
        return math.floor(limit * share + FLOOR_SLACK)

    return AppliedBudget(
        share=share,
        success_rate=rate,
        attempts=attempts,
        max_chars=scaled(max_chars),
        max_tokens=None if max_tokens is None else scaled(max_tokens),
        max_items=None if pieces is None else scaled(pieces),
    )
