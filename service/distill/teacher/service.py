"""Teacher scoring: the configured teacher endpoint's log-probs of the student's
sampled tokens, under a teacher context.

Per item: the context (inline, or a step's context built by DistillService, under
the request's teacher specs) and the continuation become token ids (given, or
tokenized with the configured tokenizer file or the endpoint's /tokenize); the
sequence context + continuation is scored by the endpoint in batches of
`teacher.max_batch`, several batches in flight at once, and the log-probs at the
continuation's positions come back aligned one to one with its tokens.

No transaction is held across the endpoint calls: the one read (the namespace
exists; referenced contexts in DistillService's own short reads) happens first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from domain.errors import BadGateway, InvalidInput, NotFound, ReflexaError, Unavailable
from service.auth import Permission, Principal
from service.distill.contexts.schemas import ContextsResponse, StepContexts
from service.distill.contexts.service import DistillService
from service.distill.teacher.endpoint import EndpointSession, Stats, TeacherEndpoint
from service.distill.teacher.protocols import ProtocolError, Scored, Scores, TeacherProtocol, Want, build_protocol
from service.distill.teacher.schemas import (
    ContextUsed,
    ScoredItem,
    TeacherContextsOptions,
    TeacherEndpointRead,
    TeacherLogprobsItem,
    TeacherLogprobsRequest,
    TeacherLogprobsResponse,
    TeacherTiming,
    TopLogprob,
)
from service.distill.teacher.tokenize import EndpointTokenizer, TextTokenizer, TokenizerFiles
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.settings import TeacherSettings
from store.database import Database

NOT_CONFIGURED = (
    "no teacher endpoint is configured: set the server setting teacher.base_url (REFLEXA_TEACHER__BASE_URL)"
)


@dataclass
class _Context:
    """One item's context, resolved: exactly one of text, messages, token_ids."""

    field: str  # where it came from, for errors
    text: str | None = None
    messages: list[dict[str, str]] | None = None
    token_ids: list[int] | None = None
    used: ContextUsed | None = None


@dataclass
class _Result:
    scores: Scores
    seconds: float


class TeacherService:
    def __init__(
        self,
        settings: TeacherSettings,
        db: Database,
        namespaces: NamespaceService,
        distill: DistillService,
        checker: LimitChecker,
    ) -> None:
        self.settings = settings
        self.db = db
        self.namespaces = namespaces
        self.distill = distill
        self.checker = checker
        self.endpoint = TeacherEndpoint(settings) if settings.enabled else None
        self.protocol: TeacherProtocol | None = build_protocol(settings) if settings.enabled else None
        self._files = TokenizerFiles()

    # -- the route --------------------------------------------------------------------

    def logprobs(self, principal: Principal, ns: str, body: TeacherLogprobsRequest) -> TeacherLogprobsResponse:
        started = time.monotonic()
        principal.require(Permission.DISTILL, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
        if self.endpoint is None or self.protocol is None:
            raise Unavailable(NOT_CONFIGURED, field="settings.teacher.base_url", rule="teacher_not_configured")
        endpoint, protocol = self.endpoint, self.protocol
        self.checker.batch_size(len(body.items), "items", self.settings.max_items)
        files = self._files.get(self.settings.tokenizer_file) if self.settings.tokenizer_file else None
        vocab_size = self.settings.vocab_size or (files.vocab_size if files else None)
        want = Want(top_k=body.top_k, entropy=body.entropy, vocab_size=vocab_size)
        why = protocol.unsupported(want)
        if why is not None:
            raise InvalidInput(f"entropy: {why}", field="entropy", rule="not_supported_by_teacher")

        built = time.monotonic()
        contexts = self._contexts(principal, ns, body)
        contexts_s = time.monotonic() - built

        stats = Stats()
        with endpoint.session(stats) as http:
            tokenized = time.monotonic()
            sequences = self._tokenize(body.items, contexts, files, http, vocab_size)
            tokenize_s = time.monotonic() - tokenized
            results = self._score(http, protocol, sequences, want)

        items = []
        for i, (item, context, sequence, result) in enumerate(
            zip(body.items, contexts, sequences, results, strict=True)
        ):
            s = result.scores
            items.append(
                ScoredItem(
                    index=i,
                    id=item.id,
                    token_ids=list(sequence.continuation),
                    logprobs=s.logprobs,
                    prompt_tokens=len(sequence.prompt),
                    entropies=s.entropies,
                    top_k=None
                    if s.top_k is None
                    else [
                        [TopLogprob(token_id=t.token_id, token=t.token, logprob=t.logprob) for t in row]
                        for row in s.top_k
                    ],
                    context=context.used,
                    endpoint_ms=_ms(result.seconds),
                )
            )
        return TeacherLogprobsResponse(
            endpoint=TeacherEndpointRead(url=endpoint.shown, protocol=protocol.name, model=self.settings.model),
            items=items,
            timing=TeacherTiming(
                total_ms=_ms(time.monotonic() - started),
                endpoint_ms=_ms(stats.busy_seconds()),
                tokenize_ms=_ms(tokenize_s),
                contexts_ms=_ms(contexts_s),
                requests=stats.requests,
                retries=stats.retries,
            ),
        )

    # -- contexts -------------------------------------------------------------------------

    def _contexts(self, principal: Principal, ns: str, body: TeacherLogprobsRequest) -> list[_Context]:
        """Each item's context; the referenced ones built in one DistillService call."""
        assert self.protocol is not None
        chat = self.protocol.chat_template
        refs = [(i, item.ref) for i, item in enumerate(body.items) if item.ref is not None]
        known = {spec.key for spec in body.contexts.teachers} if body.contexts else set()
        for i, ref in refs:
            if ref.teacher is not None and ref.teacher not in known:
                names = ", ".join(sorted(known)) or "none: give contexts.teachers"
                raise InvalidInput(
                    f"items[{i}].ref.teacher {ref.teacher!r} is not a teacher of contexts.teachers ({names})",
                    field=f"items[{i}].ref.teacher",
                    rule="known_teacher",
                )
            if ref.rendering == "messages" and not chat:
                raise InvalidInput(
                    f"items[{i}].ref.rendering: the {self.protocol.name} protocol has no chat template to render "
                    "messages with; use rendering text",
                    field=f"items[{i}].ref.rendering",
                    rule="needs_chat_template",
                )
        built = self._build(principal, ns, body, [ref.trajectory_id for _, ref in refs], [r.step for _, r in refs])
        steps: dict[tuple[str, int], StepContexts] = {}
        if built is not None:
            for trajectory in built.trajectories:
                for step in trajectory.steps:
                    steps[(trajectory.id or "", step.index)] = step
        out = []
        for i, item in enumerate(body.items):
            if item.context is not None:
                c = item.context
                if c.messages is not None and not chat:
                    raise InvalidInput(
                        f"items[{i}].context.messages: the {self.protocol.name} protocol has no chat template to "
                        "render messages with; send the context's text",
                        field=f"items[{i}].context.messages",
                        rule="needs_chat_template",
                    )
                messages = [m.model_dump() for m in c.messages] if c.messages is not None else None
                out.append(_Context(f"items[{i}].context", c.text, messages, c.token_ids))
                continue
            ref = item.ref
            assert ref is not None and built is not None
            step = steps.get((ref.trajectory_id, ref.step))
            if step is None:
                raise NotFound(f"trajectory {ref.trajectory_id!r} has no step {ref.step}", field=f"items[{i}].ref.step")
            ctx = step.plain if ref.teacher is None else step.teachers[ref.teacher]
            applicable = True if ref.teacher is None else step.teachers[ref.teacher].applicable
            used = ContextUsed(
                trajectory_id=ref.trajectory_id,
                step=ref.step,
                teacher=ref.teacher,
                rendering=ref.rendering,
                applicable=applicable,
                template_version=built.template_version,
            )
            if ref.rendering == "messages":
                messages = [m.model_dump() for m in ctx.messages or []]
                out.append(_Context(f"items[{i}].ref", messages=messages, used=used))
            else:
                out.append(_Context(f"items[{i}].ref", text=ctx.text, used=used))
        return out

    def _build(
        self, principal: Principal, ns: str, body: TeacherLogprobsRequest, ids: list[str], steps: list[int]
    ) -> ContextsResponse | None:
        """The referenced steps' contexts, as POST …/distill/contexts answers them; its
        errors name this request's fields (contexts.teachers[0].k, items[3].ref.…)."""
        if not ids:
            return None
        options = body.contexts or TeacherContextsOptions()
        trajectories = list(dict.fromkeys(ids))
        try:
            return self.distill.contexts_for(
                principal,
                ns,
                trajectories,
                options.teachers,
                snapshot=options.snapshot,
                template=options.template,
                leakage=options.leakage,
                history_max_chars=options.history_max_chars,
                steps=sorted(set(steps)),
            )
        except ReflexaError as exc:
            exc.field = _request_field(exc.field, body, trajectories)
            raise

    # -- tokens ---------------------------------------------------------------------------

    def _tokenize(
        self,
        items: Sequence[TeacherLogprobsItem],
        contexts: Sequence[_Context],
        files: TextTokenizer | None,
        http: EndpointSession,
        vocab_size: int | None,
    ) -> list[Scored]:
        assert self.protocol is not None
        protocol = self.protocol.name
        remote = EndpointTokenizer(http, self.settings.model) if self.protocol.tokenizes else None
        texts: TextTokenizer | None = files or remote

        def text_tokenizer(field: str) -> TextTokenizer:
            if texts is None:
                raise InvalidInput(
                    f"{field}: texts need a tokenizer and the {protocol} protocol has no /tokenize; "
                    "set the server setting teacher.tokenizer_file, or send token_ids",
                    field=field,
                    rule="needs_tokenizer",
                )
            return texts

        def context_ids(context: _Context) -> list[int]:
            if context.token_ids is not None:
                return context.token_ids
            if context.messages is not None:
                assert remote is not None  # only protocols with a chat template get here
                return remote.encode_chat(context.messages)
            field = f"{context.field}.text" if context.used is None else context.field
            return text_tokenizer(field).encode(context.text or "", special=True)

        def continuation_ids(i: int) -> list[int]:
            c = items[i].continuation
            if c.token_ids is not None:
                return c.token_ids
            return text_tokenizer(f"items[{i}].continuation.text").encode(c.text or "", special=False)

        with ThreadPoolExecutor(max_workers=self.settings.max_concurrency) as pool:
            prompts = list(pool.map(context_ids, contexts))
            continuations = list(pool.map(continuation_ids, range(len(items))))
        out = []
        for i, (context, prompt, continuation) in enumerate(zip(contexts, prompts, continuations, strict=True)):
            where = f"items[{i}].continuation" + (".text" if items[i].continuation.text is not None else ".token_ids")
            if not prompt:
                raise InvalidInput(f"{context.field} has no tokens", field=context.field, rule="non_empty")
            if not continuation:
                raise InvalidInput(f"{where} has no tokens", field=where, rule="non_empty")
            if vocab_size is not None:
                for name, ids in ((f"{context.field}.token_ids", context.token_ids or []), (where, continuation)):
                    bad = next((j for j, t in enumerate(ids) if t >= vocab_size), None)
                    if bad is not None:
                        raise InvalidInput(
                            f"{name}[{bad}] is {ids[bad]}; the teacher's vocabulary has {vocab_size} tokens",
                            field=f"{name}[{bad}]",
                            rule="in_vocab",
                        )
            out.append(Scored(prompt, continuation))
        return out

    # -- scoring --------------------------------------------------------------------------

    def _score(
        self, http: EndpointSession, protocol: TeacherProtocol, sequences: list[Scored], want: Want
    ) -> list[_Result]:
        size = self.settings.max_batch
        batches = [sequences[start : start + size] for start in range(0, len(sequences), size)]

        def run(batch: list[Scored]) -> list[_Result]:
            answer, seconds = http.post(protocol.path, protocol.request(batch, want))
            try:
                scores = protocol.parse(answer, batch, want)
            except ProtocolError as exc:
                raise BadGateway(
                    f"teacher endpoint {http.endpoint.shown}{protocol.path} answered in a shape the {protocol.name} "
                    f"protocol does not have: {exc}",
                    rule="teacher_bad_response",
                ) from exc
            for s, scored in zip(scores, batch, strict=True):
                if len(s.logprobs) != len(scored.continuation):  # the parsers check it; a cheap guard all the same
                    raise BadGateway(
                        f"teacher endpoint {http.endpoint.shown} scored {len(s.logprobs)} of "
                        f"{len(scored.continuation)} tokens",
                        rule="teacher_bad_response",
                    )
            return [_Result(s, seconds) for s in scores]

        workers = max(1, min(self.settings.max_concurrency, len(batches)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [result for batch in pool.map(run, batches) for result in batch]


def _request_field(field: str | None, body: TeacherLogprobsRequest, trajectories: list[str]) -> str | None:
    """A field of the contexts request DistillService saw, as a field of this one."""
    if field is None:
        return None
    match = re.match(r"trajectories\[(\d+)\]", field)
    if match:
        wanted = trajectories[int(match.group(1))]
        first = next(i for i, item in enumerate(body.items) if item.ref and item.ref.trajectory_id == wanted)
        return f"items[{first}].ref.trajectory_id"
    if field.split("[")[0].split(".")[0] in {"teachers", "snapshot", "template", "leakage", "history_max_chars"}:
        return f"contexts.{field}"
    return field


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
