"""``reflexa flush``: send what the episode logger's local spool holds."""

from __future__ import annotations

import argparse
import json
import os
import sys

from reflexa._spool import Spool
from reflexa.cli._connection import add_connection_options, client_from_args
from reflexa.config import ENV_SPOOL_PATH


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "flush", help="send the episodes a client kept in its local spool while the server was unreachable"
    )
    parser.add_argument("--spool", help=f"the spool file (default: ${ENV_SPOOL_PATH})")
    add_connection_options(parser)
    parser.set_defaults(func=_flush)


def _flush(args: argparse.Namespace) -> int:
    path = args.spool or os.environ.get(ENV_SPOOL_PATH)
    if not path:
        print(f"reflexa flush: give --spool PATH or set {ENV_SPOOL_PATH}", file=sys.stderr)
        return 2
    spool = Spool(path)
    with client_from_args(args) as client:
        report = spool.replay(client._transport)
    print(
        json.dumps(
            {
                "sent": report.sent,
                "sent_steps": report.sent_steps,
                "dropped": report.dropped,
                "left": report.left,
                "last_error": str(report.last_error) if report.last_error else None,
            }
        )
    )
    # 1 while something still waits (the server is still away): scripts can retry.
    return 1 if report.left else 0
