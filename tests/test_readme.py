"""The README's two commands stay true: CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (REPO / "README.md").read_text())[:2]


def test_readme_starts_with_the_two_commands() -> None:
    start, test = _commands()
    assert start.endswith("reflexa serve") and "-c constraints.txt" in start
    assert test.endswith("python -m pytest") and "-c constraints.txt" in test


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci/run").read_text().splitlines()
    assert _commands()[1] in ci


def test_constraints_pin_the_cpu_torch() -> None:
    assert "torch==2.13.0" in (REPO / "constraints.txt").read_text().split()


def test_readme_quick_start_runs_against_a_live_server(live_server, capsys) -> None:  # type: ignore[no-untyped-def]
    block = re.search(r"```python\n(.+?)\n```", (REPO / "README.md").read_text(), re.S).group(1)  # type: ignore[union-attr]
    code = block.replace("http://127.0.0.1:8080", live_server.url).replace("rfx_…admin key…", live_server.admin_key)
    code = code.replace('"kitchen"', '"readme-quickstart"')
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2"
    assert out[2] == "take kettle 0.95"  # reward 0 now + 0.95 * 1.0 next step
