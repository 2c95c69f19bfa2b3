"""The MCP tools: their JSON schemas (from the annotated parameters), the descriptions a
model reads, and the client calls behind them.

Every tool is a plain function the SDK runs in a worker thread (the client is
synchronous). A failure the caller can act on is raised as the SDK's ``ToolError``,
which the host sees as an ``isError`` result whose text says what to fix; anything
else is a crash, which the SDK reports as ``Error executing tool <name>`` and logs on
the server's stderr (never to the model).
"""

# No ``from __future__ import annotations``: the SDK reads these signatures at
# registration, and ``Annotated[..., Field(...)]`` must be real objects for that.

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from reflexa.check_summary import describe_check
from reflexa.client import Client
from reflexa.errors import ReflexaError
from reflexa.mcp.episodes import EpisodeBook, NoEpisode, TaskRequired
from reflexa.mcp.errors import explain
from reflexa.models import Kind, RetrieveResult

STDIO_SESSION = "stdio"  # a stdio server serves one session: its process


class Backend(Protocol):
    """What the tools need of the server (:class:`reflexa.mcp.server.ReflexaMcp`)."""

    client: Client
    namespace: str
    episodes: EpisodeBook
    spool_path: str | None
    retry_interval: float


@contextmanager
def _reflexa_errors(renames: Mapping[str, str] | None = None) -> Iterator[None]:
    """Reflexa's errors (the client's, and the server's through it) as tool errors."""
    try:
        yield
    except ReflexaError as exc:
        raise ToolError(explain(exc, renames=renames)) from exc


def session_key(ctx: Context) -> str:
    """The MCP session an episode belongs to: the transport's session id (the
    ``Mcp-Session-Id`` of streamable HTTP); stdio has one session, its process."""
    headers = ctx.headers
    if headers is None:
        return STDIO_SESSION
    session = headers.get("mcp-session-id")
    if not session:
        raise ToolError(
            "This MCP connection has no session id (stateless HTTP), so there is no episode to keep between "
            "calls: connect with a stateful session to use log_step and end_episode."
        )
    return session


def _result(text: str, data: dict[str, Any]) -> CallToolResult:
    """``text`` for the model to read, ``data`` (also as JSON) for a program."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=data,
    )


def _items_lines(result: RetrieveResult) -> list[str]:
    return [
        f"- {item.id} ({item.kind}, score {item.score:.2f}"
        + (", exact match" if item.exact_match else "")
        + f", utility {item.utility.mean:.2f} over {item.utility.uses} uses)"
        for item in result.items
    ]


# --- the tool descriptions, written for the model ---------------------------------------------

RECALL = """Recall what past episodes say about a state like the current one, before choosing an action.

Give the current observation as `state` (the text the agent sees now), and optionally the agent's
plan as `internal_state` and the `task`. Returns a ready-to-read context block (past actions in
similar states, how often each succeeded, lessons learned), the ids of the items shown, and a
`retrieval_id`. An item marked "exact match" was recorded in exactly this state.

If an episode is open in this session (see log_step), the recall is tied to it and credited
automatically when end_episode is called. Otherwise, once you know how the task went, call
report_outcome with the `retrieval_id` so that helpful items rank higher next time."""

LOG_STEP = """Record one step of the current episode: the observation the agent saw and the action it took.

The first call in a session starts an episode and must give `task` (what the agent is trying to
do); later calls add steps to it until end_episode. Never blocks on the network: steps are sent in
the background, and kept in a local spool if Reflexa is unreachable. Returns the episode's
`trajectory_id` and the step's index."""

END_EPISODE = """End the current episode with its outcome: `success` (true/false), an optional `reward`,
and for a failure a short `failure_reason` (what went wrong, in a sentence).

Delivers the episode to Reflexa, which learns from it (past successes become recallable, items
recalled during the episode are credited). Returns `status`: "delivered", or "spooled" when
Reflexa was unreachable (the episode is kept locally and delivered automatically when Reflexa is
back; nothing to do). The next log_step starts a new episode."""

REPORT_OUTCOME = """Report how a task went after using recalled items, so Reflexa credits them: items that
helped rank higher next time, misleading ones lower.

Give the `retrieval_ids` returned by recall (one or several), and `success` and/or `reward`. If you
acted on only some of the recalled items, list them in `item_ids`. Reporting the same outcome again
is harmless; a different outcome for the same retrieval is refused. Not needed for recalls made
inside an episode (end_episode credits those)."""

CHECK_ACTION = """Before taking a risky or irreversible action, check how the same action fared in states
like the current one.

Give the current `observation` and the `action` you are considering (optionally `internal_state`
and `task`). Returns the failure risk (the failure rate over credited attempts, with a 95%
interval), the steps it is based on, the other actions taken in such states ranked by success
(their support too), and heuristics that mention the action. A wide interval or few attempts
means uncertain, not safe; no history means unknown."""

SEARCH_REFLECTIONS = """Search Reflexa's reflections (lessons, heuristics, skills and past steps learned from
earlier episodes) by free text.

Reflexa has no keyword search over reflections: this matches your `query` against the states the
reflections were learned in, as recall does, so phrase it like an observation or a situation
("the door is locked and the key is not in the room") rather than as keywords. Optionally narrow
to `kinds`. Each result has an id; read `reflexa://reflections/{id}` for the full reflection and
`reflexa://reflections/{id}/evidence` for the episodes it was learned from."""


def register_tools(server: MCPServer, backend: Backend) -> None:
    """Add the tools to ``server``, each calling through ``backend``'s client."""
    for fn, description, annotations in _tools(backend):
        server.add_tool(fn, description=description, annotations=annotations, structured_output=False)


def _tools(backend: Backend) -> list[tuple[Callable[..., Any], str, ToolAnnotations]]:
    client, namespace, episodes = backend.client, backend.namespace, backend.episodes

    def recall(
        state: Annotated[str, Field(description="the current observation: what the agent sees now, as text")],
        ctx: Context,
        internal_state: Annotated[
            str | None, Field(description="the agent's current plan or subgoal (matched separately)")
        ] = None,
        task: Annotated[str | None, Field(description="the task being attempted (helps the match)")] = None,
        k: Annotated[int, Field(description="how many items to return (1 to 100)")] = 5,
        max_chars: Annotated[
            int, Field(description="the context block's maximum length in characters (100 to 200000)")
        ] = 2000,
    ) -> CallToolResult:
        render = {"format": "markdown", "max_chars": max_chars}
        episode = episodes.current(session_key(ctx))
        with _reflexa_errors():
            if episode is not None:
                result = episode.retrieve(state, internal_state=internal_state, task=task, k=k, render=render)
            else:
                result = client.retrieve(namespace, state, internal_state=internal_state, task=task, k=k, render=render)
        context = result.context or "(Nothing in memory matches this state yet.)"
        lines = [context, "", f"retrieval_id: {result.retrieval_id}"]
        if result.items:
            lines += ["items:", *_items_lines(result)]
        if episode is not None:
            lines.append(f"(tied to the open episode {episode.id}: end_episode credits it)")
        data = {
            "retrieval_id": result.retrieval_id,
            "context": result.context,
            "trajectory_id": episode.id if episode is not None else None,
            "items": [
                {"id": i.id, "kind": i.kind, "score": i.score, "exact_match": i.exact_match, "text": i.text}
                for i in result.items
            ],
        }
        return _result("\n".join(lines), data)

    def log_step(
        observation: Annotated[str, Field(description="what the agent saw before acting, as text")],
        action: Annotated[str, Field(description="the action the agent took (text, or a tool call as JSON text)")],
        ctx: Context,
        task: Annotated[
            str | None, Field(description="what the agent is trying to do; required on an episode's first step")
        ] = None,
        internal_state: Annotated[str | None, Field(description="the agent's plan or reasoning at this step")] = None,
        result: Annotated[str | None, Field(description="what the action produced (the next observation)")] = None,
        reward: Annotated[float | None, Field(description="the step's reward, if the environment gives one")] = None,
        error: Annotated[str | None, Field(description="the error the action raised, if any")] = None,
        agent: Annotated[str | None, Field(description="the agent's name (first step only)")] = None,
        environment: Annotated[str | None, Field(description="the environment's name (first step only)")] = None,
    ) -> CallToolResult:
        session = session_key(ctx)
        try:
            with _reflexa_errors(renames={"state.observation": "observation", "observation": "observation"}):
                logged = episodes.step(
                    session,
                    observation=observation,
                    action=action,
                    task=task,
                    agent=agent,
                    environment=environment,
                    internal_state=internal_state,
                    result=result,
                    reward=reward,
                    error=error,
                )
        except TaskRequired:
            raise ToolError(
                "Missing argument `task`: no episode is open in this session, and the first step of an episode "
                "must say what the agent is trying to do. Call log_step again with `task`."
            ) from None
        if logged.index is None:
            text = f"Step dropped: the episode {logged.trajectory_id} holds too many unsent steps. End it."
        else:
            start = "Started episode" if logged.started else "Episode"
            text = f"{start} {logged.trajectory_id}: step {logged.index} recorded."
        data = {"trajectory_id": logged.trajectory_id, "index": logged.index, "started": logged.started}
        return _result(text, data)

    def end_episode(
        ctx: Context,
        success: Annotated[bool | None, Field(description="whether the task was accomplished")] = None,
        reward: Annotated[float | None, Field(description="the episode's total reward, if there is one")] = None,
        failure_reason: Annotated[
            str | None, Field(description="for a failure: what went wrong, in a sentence")
        ] = None,
    ) -> CallToolResult:
        session = session_key(ctx)
        try:
            with _reflexa_errors():
                ended = episodes.end(session, success=success, reward=reward, failure_reason=failure_reason)
        except NoEpisode:
            raise ToolError("No episode is open in this session: call log_step (with `task`) first.") from None
        stats = ended.stats
        if stats.delivered:
            status = "delivered"
            text = f"Episode {ended.trajectory_id} delivered ({stats.sent} steps, outcome recorded)."
        elif stats.spooled and not stats.failed and stats.outcome in ("spooled", "sent", "none"):
            status = "spooled"
            text = (
                f"Reflexa is unreachable: episode {ended.trajectory_id} ({stats.spooled} of {stats.accepted} steps"
                f"{' and its outcome' if stats.outcome == 'spooled' else ''}) is kept in the local spool and will "
                f"be delivered when Reflexa is back (retried every {backend.retry_interval:g} s). Nothing to do."
            )
        else:
            status = "failed"
            reason = explain(stats.last_error) if stats.last_error else "not delivered"
            text = (
                f"Episode {ended.trajectory_id} was not fully delivered: {stats.sent} steps sent, {stats.failed} "
                f"failed, {stats.dropped} dropped, {stats.spooled} spooled; outcome {stats.outcome}. {reason}"
            )
        data = {
            "trajectory_id": ended.trajectory_id,
            "status": status,
            "steps": stats.accepted,
            "sent": stats.sent,
            "spooled": stats.spooled,
            "failed": stats.failed,
            "dropped": stats.dropped,
            "outcome": stats.outcome,
            "spool_path": backend.spool_path if status == "spooled" else None,
        }
        return _result(text, data)

    def report_outcome(
        retrieval_ids: Annotated[
            list[str], Field(min_length=1, description="the retrieval_id(s) recall returned, one or several")
        ],
        success: Annotated[bool | None, Field(description="whether the task succeeded")] = None,
        reward: Annotated[float | None, Field(description="the reward obtained, if there is one")] = None,
        item_ids: Annotated[
            list[str] | None,
            Field(description="only these recalled items are credited (default: the top items shown)"),
        ] = None,
    ) -> CallToolResult:
        if success is None and reward is None:
            raise ToolError("Missing argument: give `success` (true/false) and/or `reward`.")
        if item_ids is not None and len(retrieval_ids) > 1:
            raise ToolError(
                "Invalid argument `item_ids`: it names the items of one retrieval; call report_outcome once per "
                "retrieval id when you name items."
            )
        credited: list[dict[str, Any]] = []
        for n, retrieval_id in enumerate(retrieval_ids):
            with _reflexa_errors(renames={"retrieval_id": f"retrieval_ids[{n}]"}):
                outcome = client.report_retrieval_outcome(
                    namespace, retrieval_id, success=success, reward=reward, item_ids=item_ids
                )
            credited.append({"retrieval_id": retrieval_id, "credited_items": outcome.credited_items})
        total = sum(c["credited_items"] for c in credited)
        text = f"Outcome recorded for {len(credited)} retrieval(s); {total} item(s) credited." + (
            " (0 credited: already reported with this outcome, or nothing was served.)" if total == 0 else ""
        )
        return _result(text, {"retrievals": credited, "credited_items": total})

    def check_action(
        observation: Annotated[str, Field(description="the current observation: what the agent sees now, as text")],
        action: Annotated[str, Field(description="the action being considered (text, as log_step records it)")],
        internal_state: Annotated[str | None, Field(description="the agent's current plan or subgoal")] = None,
        task: Annotated[str | None, Field(description="the task being attempted")] = None,
        k: Annotated[int, Field(description="how many similar past state-action pairs to consider (1 to 100)")] = 50,
    ) -> CallToolResult:
        with _reflexa_errors(renames={"state.observation": "observation"}):
            result = client.check_action(namespace, observation, action, internal_state=internal_state, task=task, k=k)
        return _result(describe_check(result), result.model_dump(mode="json"))

    def search_reflections(
        query: Annotated[str, Field(description="a situation or observation, in words, to find lessons for")],
        kinds: Annotated[
            list[Kind] | None,
            Field(description="only these kinds: exemplar (a past step), heuristic, skill, rubric, evidence_card"),
        ] = None,
        k: Annotated[int, Field(description="how many reflections to return (1 to 100)")] = 5,
    ) -> CallToolResult:
        with _reflexa_errors(renames={"state.observation": "query", "observation": "query", "state": "query"}):
            result = client.retrieve(namespace, query, kinds=kinds, k=k)
        found = [
            {
                "id": item.id,
                "kind": item.kind,
                "text": item.text,
                "score": item.score,
                "utility": item.utility.mean,
                "uses": item.utility.uses,
                "evidence_count": item.evidence_count,
                "uri": f"reflexa://reflections/{item.id}",
            }
            for item in result.items
        ]
        if not found:
            text = "No reflection matches yet."
        else:
            text = "\n\n".join(
                f"[{r['id']}] ({r['kind']}, score {r['score']:.2f}, utility {r['utility']:.2f}, "
                f"{r['evidence_count']} evidence)\n{r['text']}"
                for r in found
            )
        return _result(text, {"reflections": found, "retrieval_id": result.retrieval_id})

    reading = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writing = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    return [
        (recall, RECALL, reading),
        (log_step, LOG_STEP, writing),
        (end_episode, END_EPISODE, writing),
        (report_outcome, REPORT_OUTCOME, ToolAnnotations(idempotent_hint=True, destructive_hint=False)),
        (check_action, CHECK_ACTION, reading),
        (search_reflections, SEARCH_REFLECTIONS, reading),
    ]
