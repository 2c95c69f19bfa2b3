"""The command line every benchmark suite shares: its parser (`--quick` or `--smoke`,
and `--out`), and the command that reproduces a run, which each report prints."""

from __future__ import annotations

import argparse

from bench.common.output import add_out_option


def suite_parser(suite: str, doc: str, section: str, *, quick: str, smoke: str, out: str) -> argparse.ArgumentParser:
    """The parser of `python -m bench.<suite>`: the first paragraph of `doc` as its
    description, `--quick` and `--smoke` (one at most; each helped by its text) and
    `--out` (`out` says what happens without one)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{suite}", description=doc.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help=quick)
    size.add_argument("--smoke", action="store_true", help=smoke)
    add_out_option(parser, section, out)
    return parser


def reproduce_command(parser: argparse.ArgumentParser, args: argparse.Namespace, *options: str) -> str:
    """The command that runs this again: the suite, its size option, `options` (each
    " --name value"), then every markdown `--out` (a JSON one is this run's own file)."""
    return (
        parser.prog
        + (" --quick" if args.quick else "")
        + (" --smoke" if args.smoke else "")
        + "".join(options)
        + "".join(f" --out {p}" for p in args.out if p.suffix == ".md")
    )
