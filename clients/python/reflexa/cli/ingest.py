"""``reflexa ingest FILE.jsonl --namespace NS``: bulk-load trajectories.

Each non-blank line is one trajectory object, shaped like the body of
``POST /v1/namespaces/{ns}/trajectories``. Lines are checked here first, so most
mistakes are reported with their line number without a round trip, then sent in
batches through the atomic batch route. When the server refuses a batch, the item
it names is reported and the rest is sent again; when it names none (the batch is
too large, say), the batch is halved until the culprit is alone.

A line without an ``id`` gets one derived from its content, so running the same
ingest twice stores nothing twice: what is already stored identically counts as a
replay, not an error. Exit status: 0 when every line was stored (or already was),
1 when a line failed or the server could not be reached, 2 when the file cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from reflexa.cli._connection import add_connection_options, client_from_args
from reflexa.cli.progress import ProgressBar
from reflexa.client import Client
from reflexa.errors import Conflict, InvalidInput, PayloadTooLarge, ReflexaError
from reflexa.models import TrajectoryCreate, coerce, dump

_ITEM_FIELD = re.compile(r"^trajectories\[(\d+)\]\.?")
#: Refusals that concern the batch's content, so another split may isolate them.
_CONTENT_ERRORS = (InvalidInput, Conflict, PayloadTooLarge)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("ingest", help="load trajectories from a JSONL file (one trajectory object a line)")
    parser.add_argument("file", type=Path, metavar="FILE.jsonl")
    parser.add_argument("--namespace", "-n", required=True)
    parser.add_argument("--batch-size", type=_positive_int, default=100, help="trajectories per request")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    add_connection_options(parser)
    parser.set_defaults(func=run)


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


@dataclass(frozen=True)
class _Line:
    number: int
    trajectory: TrajectoryCreate
    digest: str


@dataclass
class _Tally:
    lines: int = 0
    created: int = 0
    replayed: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)

    def label(self) -> str:
        return f"{self.lines} lines: {self.created} new, {self.replayed} replays, {self.failed} failed"


class _Ingest:
    """Reads, checks and sends one file, keeping the tally and the progress bar current."""

    def __init__(self, client: Client, namespace: str, batch_size: int, progress: ProgressBar) -> None:
        self._client = client
        self._namespace = namespace
        self._batch_size = batch_size
        self._progress = progress
        self._batch: dict[str, _Line] = {}
        self.tally = _Tally()

    def add(self, number: int, raw: bytes) -> None:
        self.tally.lines += 1
        try:
            obj = json.loads(raw)
        except ValueError as exc:  # includes bad UTF-8
            self._fail_line(number, f"invalid JSON: {exc}")
            return
        if not isinstance(obj, dict):
            self._fail_line(number, f"expected a JSON object, got {type(obj).__name__}")
            return
        try:
            trajectory = coerce(TrajectoryCreate, obj)
        except InvalidInput as exc:
            self._fail_line(number, _describe(exc))
            return
        body = json.dumps(dump(trajectory), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        if trajectory.id is None:
            trajectory = trajectory.model_copy(update={"id": digest[:32]})
        self._queue(_Line(number, trajectory, digest))

    def _queue(self, line: _Line) -> None:
        trajectory_id = str(line.trajectory.id)
        earlier = self._batch.get(trajectory_id)
        if earlier is not None:
            # The server refuses a batch repeating an id; an identical repeat is a replay.
            if earlier.digest == line.digest:
                self.tally.replayed += 1
            else:
                self._fail_line(
                    line.number,
                    f"id {trajectory_id!r} is used by line {earlier.number} with a different body",
                )
            return
        self._batch[trajectory_id] = line
        if len(self._batch) >= self._batch_size:
            self.flush()

    def flush(self) -> None:
        lines, self._batch = list(self._batch.values()), {}
        if lines:
            self._send(lines)

    def _send(self, lines: list[_Line]) -> None:
        """Send ``lines`` as one batch; on a refusal, drop the named item or split."""
        while lines:
            try:
                result = self._client.create_trajectories(self._namespace, [line.trajectory for line in lines])
            except _CONTENT_ERRORS as exc:
                index = _item_index(exc.field)
                if index is not None and index < len(lines):
                    self._fail_line(lines[index].number, _describe(exc, index))
                    lines = lines[:index] + lines[index + 1 :]
                    continue
                if len(lines) == 1:
                    self._fail_line(lines[0].number, _describe(exc))
                    return
                half = len(lines) // 2
                self._send(lines[:half])
                self._send(lines[half:])
                return
            self.tally.created += result.created
            self.tally.replayed += result.replayed
            return

    def _fail_line(self, number: int, message: str) -> None:
        self.tally.failed += 1
        self._progress.write(f"line {number}: {message}")

    def show(self, done_bytes: int) -> None:
        self._progress.update(done_bytes, self.tally.label())


def _item_index(error_field: str | None) -> int | None:
    match = _ITEM_FIELD.match(error_field or "")
    return int(match.group(1)) if match else None


def _describe(error: ReflexaError, index: int | None = None) -> str:
    """The error in the line's own terms: ``steps[2].action``, not ``trajectories[7].steps[2].action``."""
    message, error_field = error.message, error.field
    if index is not None:
        prefix = f"trajectories[{index}]"
        message = message.replace(prefix + ".", "").replace(prefix, "the trajectory")
        error_field = _ITEM_FIELD.sub("", error_field or "") or None
    where = f"{error_field}: " if error_field and not message.startswith(error_field) else ""
    return f"{where}{message} ({error.type})"


def run(args: argparse.Namespace) -> int:
    try:
        size = args.file.stat().st_size
        source = args.file.open("rb")
    except OSError as exc:
        print(f"reflexa ingest: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    enabled = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = ProgressBar(size, sys.stderr, enabled=enabled)
    line_number = 0
    with source, client_from_args(args) as client:
        ingest = _Ingest(client, args.namespace, args.batch_size, progress)
        done_bytes = 0
        try:
            for line_number, raw in enumerate(source, start=1):
                done_bytes += len(raw)
                if raw.strip():
                    ingest.add(line_number, raw)
                ingest.show(done_bytes)
            ingest.flush()
        except ReflexaError as exc:
            progress.close()
            print(
                f"reflexa ingest: stopped near line {line_number}: {exc}\n"
                "Lines sent before were stored; running the same command again resumes "
                "(stored lines count as replays).",
                file=sys.stderr,
            )
            print(ingest.tally.label())
            return 1
        ingest.show(done_bytes)
        progress.close()
    tally = ingest.tally
    print(f"{args.file} -> {args.namespace}: {tally.label()}")
    return 1 if tally.failed else 0
