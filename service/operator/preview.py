"""What would the agent get: a retrieve and, with an action, a pre-action check, run
for an operator exactly as the API runs them (the same services: candidates,
ranking, exact-match rule, rendering, check arithmetic), but not logged: an
operator's look is not an agent's decision, so it leaves no retrieval log row and
credits nothing."""

from __future__ import annotations

from dataclasses import dataclass

from service.auth import Permission, Principal
from service.check.schemas import CheckRequest, CheckResponse
from service.check.service import CheckService
from service.namespaces.service import NamespaceService
from service.retrieval.schemas import RetrieveRequest, RetrieveResponse
from service.retrieval.service import RetrievalService
from store.database import Database


@dataclass
class Preview:
    served: RetrieveResponse  # retrieval_id is None: nothing was logged
    check: CheckResponse | None  # with an action


class PreviewService:
    def __init__(
        self, db: Database, namespaces: NamespaceService, retrieval: RetrievalService, check: CheckService
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.retrieval = retrieval
        self.checker = check

    def require(self, principal: Principal, ns: str) -> None:
        """The empty form: the same scope and permission as a preview (another
        namespace, or none by that name, is a 404)."""
        principal.require(Permission.RETRIEVE, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)

    def preview(
        self, principal: Principal, ns: str, request: RetrieveRequest, check: CheckRequest | None = None
    ) -> Preview:
        [served] = self.retrieval.retrieve_many(principal, ns, [request], field="", log=False)
        checked = self.checker.check(principal, ns, check, log=False) if check is not None else None
        return Preview(served, checked)
