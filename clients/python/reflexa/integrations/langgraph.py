"""LangGraph on Reflexa: a ``BaseStore`` kept in a Reflexa namespace, and a ``recall`` tool.

    from reflexa import Client
    from reflexa.integrations.langgraph import ReflexaStore, reflexa_tools

    client = Client(namespace="agent-memory")
    store = ReflexaStore(client)            # or ReflexaStore(url=..., api_key=..., namespace=...)
    graph = builder.compile(store=store)    # nodes read and write it through `store` / get_store()
    tools = reflexa_tools(client, "webshop")  # [recall], for a create_react_agent-style graph

The mapping (docs/integrations.md, "LangGraph"):

- The whole store lives in one Reflexa namespace (the client's). A LangGraph item
  ``(namespace, key) → value`` is one trajectory of that namespace:
  ``id = "lg-" + sha256(json([namespace, key]))[:48]`` (so a get is one GET),
  ``agent`` = the store's marker (``"langgraph-store"``: every listing and search is
  restricted to it), ``environment`` = the first namespace label (a label longer than
  200 characters is hashed), ``task`` = ``"langgraph store item"``, and ``metadata``
  holding ``langgraph_namespace`` (the tuple, as a list), ``langgraph_key``,
  ``langgraph_value`` (the value) and, after an overwrite, ``langgraph_created_at``.
- Indexing: each text the index paths pick out of the value (LangGraph's own path
  syntax; default ``["$"]``, the whole value as JSON) is one step whose observation is
  that text, and the trajectory is stored closed (success): the server's exemplar
  reflector turns each step into an exemplar embedded by the server's embedding
  model. ``index=False``, or paths that pick nothing, store the item open and
  without steps: readable with get, listable and filterable, never in a semantic
  search's scored part.
- A natural-language search is ``POST …/retrieve`` (kinds ``exemplar``, filtered to the
  store's marker and, when the prefix has one, its first label); each hit's trajectory
  is read back, so values are always the stored ones and a deleted item never shows.
  Items that match but were not among the (at most 100) retrieved follow unscored
  (``score=None``), as LangGraph's ``InMemoryStore`` appends its unembedded ones.
- Overwriting a key with another value deletes the trajectory and stores the new one
  (the API's trajectories are write-once); ``created_at`` is carried over. That needs
  a key that may both write and delete trajectories (``admin``); with an ``agent``
  key new keys and identical re-puts work, overwrites and deletes raise ``Forbidden``.
- TTLs are not supported (``supports_ttl = False``): a put with a ttl raises.

Only this module imports LangGraph and LangChain; ``import reflexa`` never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

try:
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("reflexa.integrations.langgraph needs LangGraph: pip install 'reflexa[langgraph]'") from exc

from reflexa.check_summary import describe_check
from reflexa.client import Client
from reflexa.errors import Conflict, NotFound
from reflexa.models import Kind, Trajectory

__all__ = ["DEFAULT_AGENT", "ReflexaStore", "item_id", "reflexa_tools"]

#: The ``agent`` of every trajectory the store writes; listings and searches see only these.
DEFAULT_AGENT = "langgraph-store"
TASK = "langgraph store item"
ID_PREFIX = "lg-"
MAX_RETRIEVE_K = 100  # the server's largest k
PAGE_SIZE = 200
LABEL_MAX = 200
META_NAMESPACE = "langgraph_namespace"
META_KEY = "langgraph_key"
META_VALUE = "langgraph_value"
META_CREATED = "langgraph_created_at"


def item_id(namespace: Sequence[str], key: str) -> str:
    """The trajectory id of the item ``(namespace, key)``."""
    raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return ID_PREFIX + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:48]


def _environment(label: str) -> str:
    """The ``environment`` a namespace's first label is stored under (a valid Reflexa label)."""
    if len(label) <= LABEL_MAX and label.strip():
        return label
    return "lg#" + hashlib.sha256(label.encode("utf-8")).hexdigest()[:32]


def _validate_labels(namespace: Sequence[Any]) -> None:
    """LangGraph's label rules (as ``BaseStore``'s methods check them), for ops given to batch directly."""
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"namespace labels must be strings, got {type(label).__name__} in {namespace}")
        if not label:
            raise InvalidNamespaceError(f"namespace labels cannot be empty strings: {namespace}")
        if "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"namespace label {label!r} contains a period or a NUL: {namespace}")


def _matches_filter(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    if not filter:
        return True
    return all(_compare(value.get(key), expected) for key, expected in filter.items())


def _compare(actual: Any, expected: Any) -> bool:
    """``SearchOp.filter`` as LangGraph's stores apply it: equality (nested objects and
    lists compared member by member) or operators ``$eq``, ``$ne``, ``$gt``, ``$gte``,
    ``$lt``, ``$lte`` (numeric). A value that is not a number never matches an order
    operator (``InMemoryStore`` raises there, PostgreSQL yields no row)."""
    if isinstance(expected, Mapping):
        if any(str(k).startswith("$") for k in expected):
            return all(_operator(actual, op, operand) for op, operand in expected.items())
        if not isinstance(actual, Mapping):
            return False
        return all(_compare(actual.get(k), v) for k, v in expected.items())
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(expected)
            and all(_compare(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"Unsupported operator: {op}")
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[op]


def _matches_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or n == p for n, p in pairs)


class ReflexaStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are trajectories of one Reflexa namespace
    (see the module's docstring for the mapping and its limits).

    ``client``: a :class:`reflexa.Client` (its default namespace, or ``namespace=``,
    holds the store); without one, a client is made from ``url``, ``api_key`` and
    ``namespace`` (else ``REFLEXA_URL`` / ``REFLEXA_API_KEY`` / ``REFLEXA_NAMESPACE``)
    and closed by :meth:`close`. ``index_fields``: the default index paths (LangGraph's
    ``IndexConfig.fields``; ``PutOp.index`` overrides them per item). ``agent``: the
    marker that scopes the store inside the namespace (two stores in one namespace
    with different markers do not see each other).

    ``batch`` runs its ops one after another, in order (a get after a put of the same
    key sees the put); ``abatch`` runs ``batch`` in a worker thread (the client is
    thread-safe). A search sees this client's own writes at once (the client's
    read-your-writes session); another process's writes once the server indexed them.
    """

    supports_ttl = False

    def __init__(
        self,
        client: Client | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        namespace: str | None = None,
        index_fields: Sequence[str] = ("$",),
        agent: str = DEFAULT_AGENT,
    ) -> None:
        self._owned = client is None
        self.client = client if client is not None else Client(url, api_key, namespace=namespace)
        self.namespace = self.client.config.namespace_or_default(namespace)
        self.index_fields = list(index_fields)
        self.agent = agent

    def close(self) -> None:
        if self._owned:
            self.client.close()

    def __enter__(self) -> ReflexaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- BaseStore -------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                _validate_labels(op.namespace)
                results.append(self._get(tuple(op.namespace), op.key))
            elif isinstance(op, PutOp):
                _validate_labels(op.namespace)
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                _validate_labels(op.namespace_prefix)
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                for condition in op.match_conditions or ():
                    _validate_labels(condition.path)
                results.append(self._list_namespaces(op))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # --- the ops ---------------------------------------------------------------------------

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        try:
            trajectory = self.client.get_trajectory(self.namespace, item_id(namespace, key))
        except NotFound:
            return None
        item = self._item(trajectory)
        return item if item is not None and (item.namespace, item.key) == (namespace, key) else None

    def _put(self, op: PutOp) -> None:
        namespace, key = tuple(op.namespace), str(op.key)
        tid = item_id(namespace, key)
        if op.value is None:
            self._delete(tid)
            return
        if op.ttl is not None:
            raise NotImplementedError("ReflexaStore does not support TTLs (supports_ttl is False); put with ttl=None")
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        value = dict(op.value)
        texts = self._index_texts(value, op.index)
        metadata: dict[str, Any] = {META_NAMESPACE: list(namespace), META_KEY: key, META_VALUE: value}
        for _attempt in range(3):
            try:
                self._create(tid, namespace, key, metadata, texts)
                return
            except Conflict:
                pass
            # Another value is stored under this key: keep its creation time, replace it.
            try:
                old = self.client.get_trajectory(self.namespace, tid)
            except NotFound:
                continue
            created = (old.metadata or {}).get(META_CREATED) or old.created_at.isoformat()
            metadata = {**metadata, META_CREATED: created}
            if old.metadata == metadata and [s.state.observation for s in old.steps or ()] == texts:
                return  # the same value again, after an earlier overwrite
            self._delete(tid)
        self._create(tid, namespace, key, metadata, texts)

    def _create(
        self, tid: str, namespace: tuple[str, ...], key: str, metadata: dict[str, Any], texts: list[str]
    ) -> None:
        action = f"remember {key}"
        steps = [{"index": i, "state": {"observation": text}, "action": action} for i, text in enumerate(texts)]
        self.client.create_trajectory(
            self.namespace,
            id=tid,
            task=TASK,
            environment=_environment(namespace[0]),
            agent=self.agent,
            metadata=metadata,
            steps=steps,
            outcome={"success": True} if steps else None,
        )

    def _delete(self, tid: str) -> None:
        with contextlib.suppress(NotFound):  # never stored, or a retried delete that had arrived
            self.client.delete_trajectory(self.namespace, tid)

    def _index_texts(self, value: Mapping[str, Any], index: Any) -> list[str]:
        if index is False:
            return []
        paths = self.index_fields if index is None else list(index)
        texts: list[str] = []
        for path in paths:
            texts.extend(text for text in get_text_at_path(value, path) if text.strip())
        return list(dict.fromkeys(texts))  # one exemplar per distinct text

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        want = op.offset + op.limit
        found: list[SearchItem] = []
        seen: set[str] = set()
        if op.query:
            result = self.client.retrieve(
                self.namespace,
                op.query,
                environment=_environment(prefix[0]) if prefix else None,
                kinds=["exemplar"],
                k=MAX_RETRIEVE_K,
                filters={"agent": self.agent},
            )
            for hit in result.items:
                if len(found) >= want:
                    break
                for evidence in hit.evidence:
                    tid = evidence.trajectory_id
                    if tid in seen or not tid.startswith(ID_PREFIX):
                        continue
                    seen.add(tid)
                    try:
                        trajectory = self.client.get_trajectory(self.namespace, tid)
                    except NotFound:
                        continue  # deleted since it was indexed
                    item = self._item(trajectory, score=hit.score)
                    if item is not None and self._selected(item, prefix, op.filter):
                        found.append(item)
        if len(found) < want:
            for trajectory in self._scan(prefix):
                if trajectory.id in seen:
                    continue
                item = self._item(trajectory)
                if item is not None and self._selected(item, prefix, op.filter):
                    found.append(item)
                    if len(found) >= want:
                        break
        return found[op.offset : want]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        first = next((c.path[0] for c in conditions if c.match_type == "prefix" and c.path and c.path[0] != "*"), None)
        namespaces: set[tuple[str, ...]] = set()
        for trajectory in self._scan((first,) if first is not None else ()):
            item = self._item(trajectory)
            if item is not None and all(_matches_condition(c, item.namespace) for c in conditions):
                namespaces.add(item.namespace if op.max_depth is None else item.namespace[: op.max_depth])
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    # --- helpers ---------------------------------------------------------------------------

    def _scan(self, prefix: tuple[str, ...]) -> Iterator[Trajectory]:
        """The store's trajectories, newest first (narrowed to the prefix's first label)."""
        return self.client.iter_trajectories(
            self.namespace,
            agent=self.agent,
            environment=_environment(prefix[0]) if prefix else None,
            page_size=PAGE_SIZE,
        )

    @staticmethod
    def _selected(item: Item, prefix: tuple[str, ...], filter: Mapping[str, Any] | None) -> bool:
        return item.namespace[: len(prefix)] == prefix and _matches_filter(item.value, filter)

    def _item(self, trajectory: Trajectory, score: float | None = None) -> SearchItem | None:
        """The LangGraph item a trajectory holds (``None`` when it is not one of this store's)."""
        meta = trajectory.metadata or {}
        namespace, key, value = meta.get(META_NAMESPACE), meta.get(META_KEY), meta.get(META_VALUE)
        if trajectory.agent != self.agent or not isinstance(namespace, list) or not isinstance(key, str):
            return None
        if not isinstance(value, dict) or trajectory.id != item_id(namespace, key):
            return None
        created = meta.get(META_CREATED)
        return SearchItem(
            namespace=tuple(namespace),
            key=key,
            value=value,
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else trajectory.created_at,
            updated_at=trajectory.created_at,
            score=score,
        )


# --- tools for a LangGraph agent -------------------------------------------------------------


def reflexa_tools(
    client: Client,
    namespace: str | None = None,
    *,
    k: int = 5,
    kinds: Sequence[Kind] | None = None,
    environment: str | None = None,
    filters: Mapping[str, Any] | None = None,
    max_chars: int = 4000,
) -> list[BaseTool]:
    """LangChain tools over ``client`` for a tool-calling LangGraph agent
    (``create_react_agent(model, reflexa_tools(client, "webshop"))`` or a ``ToolNode``):

    - ``recall(state, internal_state=None, task=None)``: ``POST …/retrieve`` for the
      state, answering the rendered context (markdown, at most ``max_chars``) followed
      by a line ``retrieval_id: r_…``; the tool message's ``artifact`` holds
      ``{"retrieval_id", "item_ids", "context"}`` for code that reports the outcome
      (``client.report_retrieval_outcome``).
    - ``check_action(state, action, internal_state=None, task=None)``: ``POST …/check``
      before acting, answering the risk (failure rate with its 95% interval), the
      alternatives best first, the heuristics naming the action and the evidence
      (:func:`reflexa.check_summary.describe_check`, as the MCP server words it); the
      ``artifact`` is the whole answer as JSON.

    ``k``, ``kinds``, ``environment`` and ``filters`` are passed to every retrieve;
    ``filters`` to every check too.
    """
    ns = client.config.namespace_or_default(namespace)

    def recall(state: str, internal_state: str | None = None, task: str | None = None) -> tuple[str, dict[str, Any]]:
        """Recall past experience in states like this one: what was done there and how it went.

        Args:
            state: the current observation, as text.
            internal_state: your current plan or subgoal, if any.
            task: the task being worked on, if known.
        """
        result = client.retrieve(
            ns,
            state,
            internal_state=internal_state,
            task=task,
            environment=environment,
            kinds=kinds,
            k=k,
            filters=filters,
            render={"format": "markdown", "max_chars": max_chars},
        )
        context = result.context or "No relevant past experience."
        artifact = {
            "retrieval_id": result.retrieval_id,
            "item_ids": [item.id for item in result.items],
            "context": result.context,
        }
        return f"{context}\n\nretrieval_id: {result.retrieval_id}", artifact

    def check_action(
        state: str, action: str, internal_state: str | None = None, task: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Before a risky or irreversible action, check how the same action fared in states like this one.

        Args:
            state: the current observation, as text.
            action: the action being considered.
            internal_state: your current plan or subgoal, if any.
            task: the task being worked on, if known.
        """
        result = client.check_action(ns, state, action, internal_state=internal_state, task=task, filters=filters)
        return describe_check(result), result.model_dump(mode="json")

    return [
        StructuredTool.from_function(recall, name="recall", response_format="content_and_artifact"),
        StructuredTool.from_function(check_action, name="check_action", response_format="content_and_artifact"),
    ]
