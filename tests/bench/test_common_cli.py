"""bench/common/cli.py: the size option a suite's command line takes picks its config
(no option: the full one), at most one size at a time, each option helped by what
the suite says of that size."""

from __future__ import annotations

import pytest

from bench.common.cli import Sizes, reproduce_command, suite_parser

SIZES = Sizes("full", "quick", "smoke", quick_help="a few minutes", smoke_help="seconds, for tests/bench")


@pytest.mark.parametrize(("argv", "picked"), [([], "full"), (["--quick"], "quick"), (["--smoke"], "smoke")])
def test_the_size_option_picks_the_config(argv: list[str], picked: str) -> None:
    parser = suite_parser("demo", "Demo suite.\n\nMore.", "demo", SIZES, out="Printed.")
    args = parser.parse_args([*argv, "--out", "r.md", "--out", "r.json"])
    assert SIZES.pick(args) == picked
    assert reproduce_command(parser, args) == " ".join(["python -m bench.demo", *argv, "--out r.md"])


def test_one_size_at_most_and_each_helped_by_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    parser = suite_parser("demo", "Demo suite.\n\nMore.", "demo", SIZES, out="Printed.")
    with pytest.raises(SystemExit):
        parser.parse_args(["--quick", "--smoke"])
    text = parser.format_help()
    assert "a few minutes" in text and "seconds, for tests/bench" in text and "Demo suite." in text
    capsys.readouterr()
