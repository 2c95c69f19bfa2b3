"""bench/common/report.py's Table, which the suites' sections write their tables with:
the header and alignment row it derives, rows as written (empty cells kept), and a
row or alignment that does not fit the header refused before a ragged table is
written."""

from __future__ import annotations

import pytest

from bench.common.report import Table


def test_header_alignment_and_rows() -> None:
    table = Table("method | ms | share", "lrr")
    table.row("grpo | 1.5 | 20%")
    table.row("**p50** | | 30%")
    assert table.lines == [
        "| method | ms | share |",
        "|---|---:|---:|",
        "| grpo | 1.5 | 20% |",
        "| **p50** | | 30% |",
    ]


def test_a_row_with_another_number_of_cells_is_refused() -> None:
    table = Table("method | ms | share", "lrr")
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        table.row("grpo | 1.5")
    with pytest.raises(ValueError, match="4 cells for 3 columns"):
        table.row("grpo | 1.5 | 20% | extra")
    assert len(table.lines) == 2


@pytest.mark.parametrize("align", ["lr", "lrrr", "lcr"])
def test_an_alignment_that_does_not_fit_the_header_is_refused(align: str) -> None:
    with pytest.raises(ValueError, match="for 3 columns"):
        Table("method | ms | share", align)
