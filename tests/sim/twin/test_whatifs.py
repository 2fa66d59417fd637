"""docs/sim/what-ifs.md's table still holds: bench/sim_whatifs.py reruns every setup on the
virtual clock and each figure must match the page's within tolerance, so a change to the
model or a preset that moves an answer fails here until the page is regenerated."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "sim" / "what-ifs.md"
NUMBER = re.compile(r"—|(\d[\d,]*(?:\.\d+)?)( s)?")


def bench(name: str = "sim_whatifs") -> object:
    """bench/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def rows(markdown: str) -> dict[str, list[str]]:
    """The table's rows by setup key (the comment in the first cell), cells after it."""
    found = {}
    for line in markdown.splitlines():
        if match := re.match(r"\| .*? <!-- ([\w-]+) --> \|(.*)\|$", line):
            found[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return found


def numbers(cell: str) -> list[float]:
    """A cell's figures in ms (or req/s), '—' kept as nan so a change to or from it shows."""
    out = []
    for match in NUMBER.finditer(cell):
        value, seconds = match.groups()
        scale = 1000 if seconds else 1
        out.append(float("nan") if value is None else float(value.replace(",", "")) * scale)
    return out


def close(page: float, now: float) -> bool:
    if page != page or now != now:  # nan: no request finished
        return page != page and now != now
    return abs(page - now) <= max(0.1 * abs(page), 5.0)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about four minutes on one free core, more under load
def test_the_pages_figures_still_hold() -> None:
    module = bench()
    page = rows(PAGE.read_text())
    now = rows(module.table(module.measure()))  # type: ignore[attr-defined]
    assert page.keys() == now.keys()
    for key, cells in page.items():
        for column, (was, is_) in enumerate(zip(cells, now[key], strict=True)):
            a, b = numbers(was), numbers(is_)
            ok = len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
            assert ok, f"{key}, column {column + 2}: page {was!r}, now {is_!r}"


def test_the_table_parser_reads_what_the_bench_writes() -> None:
    module = bench()
    figures = {"ttft_p50": 0.0857, "ttft_p99": 12.3, "tpot_p50": 0.0168, "tpot_p99": None}
    row = {
        "label": "x",
        "at_low": figures,
        "at_rate": {**figures, "steady": False, "completed_per_s": 2.64},
        "carries": 6.5,
        "error": "none",
    }
    table = module.table({"k": row})  # type: ignore[attr-defined]
    cells = rows(table)["k"]
    assert numbers(cells[0]) == [86.0, 12_000.0]
    assert numbers(cells[1])[0] == 17.0 and numbers(cells[1])[1] != numbers(cells[1])[1]
    assert numbers(cells[3]) == [6.5]
    assert not close(86.0, 100.0) and close(86.0, 90.0)
