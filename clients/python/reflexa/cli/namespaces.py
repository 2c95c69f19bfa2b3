"""``reflexa namespaces create|list``."""

from __future__ import annotations

import argparse

from reflexa.cli._connection import add_connection_options, client_from_args


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("namespaces", help="create and list namespaces")
    commands = parser.add_subparsers(dest="namespaces_command", required=True, metavar="ACTION")

    create = commands.add_parser("create", help="create a namespace (an identical one is returned as is)")
    create.add_argument("name")
    create.add_argument("--gamma", type=float, help="discount for return-to-go (server default 0.95)")
    add_connection_options(create)
    create.set_defaults(func=_create)

    listing = commands.add_parser("list", help="list the namespaces the key may see, one JSON object a line")
    add_connection_options(listing)
    listing.set_defaults(func=_list)


def _create(args: argparse.Namespace) -> int:
    settings = {"gamma": args.gamma} if args.gamma is not None else None
    with client_from_args(args) as client:
        print(client.create_namespace(args.name, settings).model_dump_json())
    return 0


def _list(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        for namespace in client.list_namespaces():
            print(namespace.model_dump_json())
    return 0
