"""The ``reflexa`` command.

The client package owns the command and provides the subcommands that only need
HTTP (``ingest``, ``namespaces``, ``flush``; ``mcp`` with the ``mcp`` extra). Other
installed packages add theirs through the
``reflexa.commands`` entry point group: each entry is a ``register(subparsers)``
callable (the server package adds ``serve``, ``db`` and ``keys`` this way), so a
client-only install has a working command without any server code.

Every subcommand sets ``func`` (``set_defaults(func=...)``); :func:`main` calls
``args.func(args)`` and returns its exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from reflexa._version import __version__
from reflexa.cli import flush, ingest, mcp, namespaces
from reflexa.errors import ReflexaError

PLUGIN_GROUP = "reflexa.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reflexa", description="Reflexa: agent memory and reflection.")
    parser.add_argument("--version", action="version", version=f"reflexa {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    ingest.register(subparsers)
    namespaces.register(subparsers)
    flush.register(subparsers)
    mcp.register(subparsers)
    _load_plugins(subparsers)
    return parser


def _load_plugins(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Let installed packages add subcommands. A broken plugin costs its own commands,
    with a warning, not the whole CLI."""
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            entry.load()(subparsers)
        except Exception as exc:
            print(f"reflexa: warning: commands from {entry.value!r} not loaded: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except ReflexaError as exc:
        print(f"reflexa: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
