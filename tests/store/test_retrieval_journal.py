"""store/retrieval_journal.py: records are kept until marked done, a segment is emptied
or removed once nothing in it is pending, and a file whose process is gone (and only
such a file) is offered for replay, its torn last line left out."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from store.retrieval_journal import Journal, orphans, read_records, scan
from tests.conftest import REPO


def files(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.glob("*.jsonl")}


def test_a_segment_is_emptied_once_nothing_in_it_is_pending(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    first = journal.append([{"id": "r_1"}, {"id": "r_2"}])
    second = journal.append([{"id": "r_3"}])
    assert journal.pending == 3
    [(name, size)] = files(tmp_path).items()
    assert [r["id"] for r in read_records(tmp_path / name)] == ["r_1", "r_2", "r_3"]
    journal.done(first)
    assert files(tmp_path) == {name: size} and journal.pending == 1  # r_3 is still pending
    journal.done(second)
    assert files(tmp_path) == {name: 0} and journal.pending == 0
    later = journal.append([{"id": "r_4"}])  # appends after a truncation start at 0
    assert [r["id"] for r in read_records(tmp_path / name)] == ["r_4"]
    journal.done(later)


def test_a_full_segment_is_replaced_and_removed_when_done(tmp_path: Path) -> None:
    journal = Journal(tmp_path, segment_bytes=64)
    old = journal.append([{"id": "r_1", "pad": "x" * 80}])  # past 64 bytes: the next append goes to a new file
    new = journal.append([{"id": "r_2"}])
    assert len(files(tmp_path)) == 2
    journal.done(new)
    assert sorted(files(tmp_path).values())[0] == 0 and sorted(files(tmp_path).values())[1] > 64
    journal.done(old)
    assert list(files(tmp_path).values()) == [0]


def test_only_a_gone_process_s_file_is_an_orphan(tmp_path: Path) -> None:
    write = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from store.retrieval_journal import Journal
        j = Journal(Path({str(tmp_path)!r}))
        j.append([{{"id": sys.argv[1], "namespace": "n"}}])
        with open(j._segment.path, "ab") as f:
            f.write(b'{{"id": "torn')  # a write cut short
        print("ready", flush=True)
        if sys.argv[2] == "stay":
            time.sleep(60)
        os._exit(0)
        """
    )
    gone = subprocess.run([sys.executable, "-c", write, "r_gone", "exit"], cwd=REPO, capture_output=True, text=True)
    assert gone.returncode == 0, gone.stderr
    alive = subprocess.Popen([sys.executable, "-c", write, "r_alive", "stay"], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert alive.stdout is not None and alive.stdout.readline().strip() == b"ready"
        mine = Journal(tmp_path)  # this process's own file is held too
        ticket = mine.append([{"id": "r_mine", "namespace": "n"}])
        found = list(orphans(tmp_path))
        assert [[r["id"] for r in o.records] for o in found] == [["r_gone"]]
        assert list(orphans(tmp_path)) == []  # held by the first caller until it is done with it
        found[0].remove()
        assert sorted(r["id"] for r in scan(tmp_path, b'"namespace":"n"')) == ["r_alive", "r_mine"]
        assert scan(tmp_path, b'"namespace":"other"') == []
        mine.done(ticket)
    finally:
        alive.kill()
        alive.wait()
    left = list(orphans(tmp_path))
    assert [[r["id"] for r in o.records] for o in left] == [["r_alive"]]  # not this process's own
    for o in left:
        o.release()
