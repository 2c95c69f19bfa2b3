"""A namespace's settings as stored, read in the caller's session and parsed with
today's defaults (domain.settings holds the words; this is the one read of them)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from domain.settings import NamespaceSettings, parse_settings
from store import namespaces as namespaces_repo


def read_settings(session: Session, namespace: str) -> NamespaceSettings:
    """A namespace's settings as stored (defaults for a namespace gone meanwhile)."""
    row = namespaces_repo.read_namespace(session, namespace)
    return parse_settings(row.settings if row else {})
