"""The command line every benchmark suite shares: its sizes (the full config, and the
smaller ones `--quick` and `--smoke` pick), its parser (those options and `--out`),
and the command that reproduces a run, which each report prints."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bench.common.output import add_out_option

C = TypeVar("C")


@dataclass(frozen=True)
class Sizes(Generic[C]):
    """A suite's configs: the full one (no size option), `--quick`'s and `--smoke`'s, and
    what each smaller one is (its option's help), written next to them."""

    full: C
    quick: C
    smoke: C
    quick_help: str
    smoke_help: str

    def pick(self, args: argparse.Namespace) -> C:
        """The config the parsed size option asks for."""
        return self.smoke if args.smoke else self.quick if args.quick else self.full


def suite_parser(suite: str, doc: str, section: str, sizes: Sizes[Any], *, out: str) -> argparse.ArgumentParser:
    """The parser of `python -m bench.<suite>`: the first paragraph of `doc` as its
    description, `--quick` and `--smoke` (one at most; each helped by what `sizes` says
    of it) and `--out` (`out` says what happens without one)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{suite}", description=doc.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help=sizes.quick_help)
    size.add_argument("--smoke", action="store_true", help=sizes.smoke_help)
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
