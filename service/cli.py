"""Server-side commands of the `reflexa` CLI: serve, db, keys.

The `reflexa` command belongs to the client package; it finds these through the
`reflexa.commands` entry point, so a client-only install has no server commands
and the client never imports server code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from service.settings import Settings, get_settings


def _settings(args: argparse.Namespace) -> Settings:
    settings = get_settings()
    if getattr(args, "database_url", None):
        settings = settings.model_copy(update={"database_url": args.database_url})
    return settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from migrations import upgrade
    from service.app import create_app

    settings = _settings(args)
    url = settings.resolved_database_url
    migrate = args.migrate if args.migrate is not None else url.startswith("sqlite")
    if migrate:
        upgrade(url)
    host = args.host or settings.host
    port = args.port or settings.port
    print(f"Reflexa on http://{host}:{port}  (database: {_redact(url)})", file=sys.stderr, flush=True)
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=args.log_level,
        access_log=False,
        log_config=log_config(),
    )
    return 0


def log_config() -> dict[str, object]:
    """uvicorn's logging, every line with its request id (our loggers' too)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    from service.request_id import LOG_FORMAT, install_log_record_factory

    install_log_record_factory()
    config = copy.deepcopy(LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = LOG_FORMAT
        formatter.pop("use_colors", None)
        formatter["()"] = "logging.Formatter"
    config["loggers"]["reflexa"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _db_upgrade(args: argparse.Namespace) -> int:
    from migrations import upgrade

    url = _settings(args).resolved_database_url
    upgrade(url, args.revision)
    print(f"database at {_redact(url)} upgraded to {args.revision}", file=sys.stderr)
    return 0


def _db_current(args: argparse.Namespace) -> int:
    from migrations import schema_status
    from store.database import create_db_engine

    engine = create_db_engine(_settings(args).resolved_database_url)
    try:
        status = schema_status(engine)
    finally:
        engine.dispose()
    print(json.dumps({"current": list(status.current), "head": list(status.head), "up_to_date": status.up_to_date}))
    return 0 if status.up_to_date else 1


def _keys_create(args: argparse.Namespace) -> int:
    from domain.errors import ReflexaError
    from migrations import schema_status
    from service.keys.schemas import KeyCreate
    from service.keys.service import KeyService
    from store.database import Database

    settings = _settings(args)
    db = Database(settings.resolved_database_url)
    try:
        status = schema_status(db.engine)
        if not status.up_to_date:
            print(status.upgrade_hint(), file=sys.stderr)
            return 2
        body = KeyCreate(role=args.role, namespaces=args.namespace, description=args.description)
        created = KeyService(db).create_unchecked(body)
    except (ValidationError, ReflexaError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        db.dispose()
    print(created.model_dump_json(indent=2))
    return 0


def _open(settings: Settings):  # type: ignore[no-untyped-def]
    """Database + services for a command that works without the HTTP server."""
    from migrations import schema_status
    from service.container import Services
    from store.database import Database

    db = Database(settings.resolved_database_url, pool_size=settings.db_pool_size)
    status = schema_status(db.engine)
    if not status.up_to_date:
        db.dispose()
        raise SystemExit(status.upgrade_hint())
    return Services.build(settings, db)


def _worker(args: argparse.Namespace) -> int:
    import signal

    settings = _settings(args)
    if args.concurrency:
        settings = settings.model_copy(
            update={"worker": settings.worker.model_copy(update={"concurrency": args.concurrency})}
        )
    services = _open(settings)
    worker = services.worker

    def stop(*_: object) -> None:
        worker.stop(timeout=0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"reflexa worker {worker.worker_id}: concurrency {settings.worker.concurrency}", file=sys.stderr, flush=True)
    if args.until_idle:
        n = worker.run_until_idle()
        print(f"ran {n} jobs", file=sys.stderr)
    else:
        worker.serve()
    services.db.dispose()
    return 0


def _reindex(args: argparse.Namespace) -> int:
    from reflectors.reindex import reindex
    from store import namespaces as namespaces_repo

    services = _open(_settings(args))
    try:
        with services.db.read() as session:
            names = args.namespace or [n.name for n in namespaces_repo.list_namespaces(session, None)]
        counts = reindex(services.db, services.embedder, services.registry, names)
    finally:
        services.db.dispose()
    print(json.dumps(counts))
    return 0


def _export(args: argparse.Namespace) -> int:
    from service.namespaces.backup import BackupError, export_namespace
    from store.database import Database

    db = Database(_settings(args).resolved_database_url)
    try:
        if args.out == "-":
            rows = export_namespace(db, args.namespace, sys.stdout.buffer)
        else:
            with open(args.out, "xb") as out:
                rows = export_namespace(db, args.namespace, out)
    except (BackupError, FileExistsError) as exc:
        print(f"reflexa export: {exc}", file=sys.stderr)
        return 1
    finally:
        db.dispose()
    print(f"exported {rows} rows of namespace {args.namespace!r}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from service.namespaces.backup import BackupError, import_namespace
    from store.database import Database

    db = Database(_settings(args).resolved_database_url)
    try:
        with open(args.file, "rb") as source:
            loaded = import_namespace(db, source)
    except (BackupError, OSError) as exc:
        print(f"reflexa import: {exc}; nothing was imported", file=sys.stderr)
        return 1
    finally:
        db.dispose()
    print(json.dumps({"namespace": loaded.namespace, "rows": loaded.rows}))
    return 0


def _db_backup(args: argparse.Namespace) -> int:
    from service.namespaces.backup import BackupError, backup_sqlite

    try:
        backup_sqlite(_settings(args).resolved_database_url, Path(args.target))
    except BackupError as exc:
        print(f"reflexa db backup: {exc}", file=sys.stderr)
        return 1
    print(f"copied to {args.target}", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Entry point `reflexa.commands`: add the server commands to `reflexa`."""
    db_url = {"help": "overrides REFLEXA_DATABASE_URL"}

    serve = subparsers.add_parser("serve", help="start the service (embedded defaults: SQLite under ./reflexa-data)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--database-url", **db_url)
    serve.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="upgrade the schema before starting (default: on for SQLite, off for PostgreSQL)",
    )
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_serve)

    db = subparsers.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="migrate the schema to the newest revision")
    up.add_argument("--revision", default="head")
    up.add_argument("--database-url", **db_url)
    up.set_defaults(func=_db_upgrade)
    cur = db_sub.add_parser("current", help="show the schema revision; exit 1 when out of date")
    cur.add_argument("--database-url", **db_url)
    cur.set_defaults(func=_db_current)
    bk = db_sub.add_parser("backup", help="copy a live SQLite database (online; PostgreSQL: pg_dump)")
    bk.add_argument("target", help="the new file")
    bk.add_argument("--database-url", **db_url)
    bk.set_defaults(func=_db_backup)

    ex = subparsers.add_parser("export", help="write a namespace, with everything learned, to a JSON-lines file")
    ex.add_argument("namespace")
    ex.add_argument("--out", required=True, help="a new file, or - for standard output")
    ex.add_argument("--database-url", **db_url)
    ex.set_defaults(func=_export)
    im = subparsers.add_parser("import", help="load a `reflexa export` file into this database (all or nothing)")
    im.add_argument("file")
    im.add_argument("--database-url", **db_url)
    im.set_defaults(func=_import)

    worker = subparsers.add_parser("worker", help="run reflection jobs (any number of these may run)")
    worker.add_argument("--concurrency", type=int, help="jobs at once (default REFLEXA_WORKER__CONCURRENCY)")
    worker.add_argument("--until-idle", action="store_true", help="exit when no job is runnable")
    worker.add_argument("--database-url", **db_url)
    worker.set_defaults(func=_worker)

    rx = subparsers.add_parser("reindex", help="re-encode missing vectors and rebuild the index snapshots from SQL")
    rx.add_argument("--namespace", action="append", help="repeat for several; default: all")
    rx.add_argument("--database-url", **db_url)
    rx.set_defaults(func=_reindex)

    keys = subparsers.add_parser("keys", help="API keys (direct database access)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--role", required=True, choices=["admin", "operator", "agent", "trainer"])
    create.add_argument(
        "--namespace", action="append", required=True, help="repeat for several; '*' for all namespaces"
    )
    create.add_argument("--description")
    create.add_argument("--database-url", **db_url)
    create.set_defaults(func=_keys_create)
