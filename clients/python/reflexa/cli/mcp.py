"""``reflexa mcp``: serve Reflexa's memory to an MCP host (tools for an agent's model).

Needs the ``mcp`` extra (``pip install 'reflexa[mcp]'``); imported only when the
command runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import argparse
import sys

from reflexa.cli._connection import add_connection_options
from reflexa.config import ENV_NAMESPACE, ENV_SPOOL_PATH


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from reflexa.mcp.settings import DEFAULT_FLUSH_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_RETRY_INTERVAL

    parser = subparsers.add_parser(
        "mcp",
        help="run an MCP server (stdio or streamable HTTP) giving an agent recall, episode logging and credit",
        description="Reflexa as an MCP server. Tools: recall, log_step, end_episode, report_outcome, "
        "search_reflections; resources reflexa://reflections/{id} and …/evidence (docs/integrations.md).",
    )
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP: the port (default 8765); the path is /mcp")
    parser.add_argument("--namespace", "-n", help=f"the namespace (default: ${ENV_NAMESPACE})")
    add_connection_options(parser)
    parser.add_argument(
        "--spool",
        help=f"the spool file for episodes Reflexa could not take (default: ${ENV_SPOOL_PATH}, "
        "else one under ~/.cache/reflexa for this URL and namespace)",
    )
    parser.add_argument("--no-spool", action="store_true", help="no spool: undeliverable episodes are lost")
    parser.add_argument(
        "--flush-timeout",
        type=float,
        default=DEFAULT_FLUSH_TIMEOUT,
        help=f"seconds end_episode waits for delivery before spooling (default {DEFAULT_FLUSH_TIMEOUT:g})",
    )
    parser.add_argument(
        "--retry-interval",
        type=float,
        default=DEFAULT_RETRY_INTERVAL,
        help=f"seconds between attempts to deliver the spool (default {DEFAULT_RETRY_INTERVAL:g})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT,
        help=f"an episode untouched this long is closed without an outcome (default {DEFAULT_IDLE_TIMEOUT:g} s)",
    )
    parser.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="WARNING", help="stderr logging"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from reflexa.mcp import McpSettings, ReflexaMcp
    except ImportError as exc:  # the extra is not installed
        print(f"reflexa mcp: needs the MCP SDK ({exc}); install it with: pip install 'reflexa[mcp]'", file=sys.stderr)
        return 2
    try:
        settings = McpSettings.resolve(
            url=args.url,
            api_key=args.api_key,
            namespace=args.namespace,
            spool_path=args.spool,
            spool=not args.no_spool,
            flush_timeout=args.flush_timeout,
            retry_interval=args.retry_interval,
            idle_timeout=args.idle_timeout,
        )
    except ValueError as exc:
        print(f"reflexa mcp: {exc}", file=sys.stderr)
        return 2
    ReflexaMcp(settings, log_level=args.log_level).run(args.transport, host=args.host, port=args.port)
    return 0
