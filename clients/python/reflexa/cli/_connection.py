"""The connection options every HTTP subcommand shares, and the client they make."""

from __future__ import annotations

import argparse

from reflexa.client import Client


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="server URL (default: $REFLEXA_URL or http://127.0.0.1:8080)")
    parser.add_argument("--api-key", help="API key (default: $REFLEXA_API_KEY)")


def client_from_args(args: argparse.Namespace) -> Client:
    return Client(args.url, args.api_key)
