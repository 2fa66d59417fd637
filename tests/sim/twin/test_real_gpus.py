"""docs/sim/real-gpus.md's tables still hold: bench/real_gpu_twin.py refits the twin to
each published data set's lowest rate of real vLLM, replays every rate, and each figure,
verdict and knee must match the page's (figures within 10% or 5 ms), so a change to the fit
or the model that moves a prediction against real GPUs fails here until the page is
regenerated."""

from __future__ import annotations

import re

import pytest

from tests.sim.twin.test_whatifs import ROOT, bench, close, numbers, rows

PAGE = ROOT / "docs" / "sim" / "real-gpus.md"
WORDS = re.compile(r"[A-Za-z]{3,}")


def _check(page: dict[str, list[str]], now: dict[str, list[str]]) -> None:
    assert page.keys() == now.keys()
    for key, cells in page.items():
        for column, (was, is_) in enumerate(zip(cells, now[key], strict=True)):
            a, b = numbers(was), numbers(is_)
            ok = len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
            ok = ok and WORDS.findall(was) == WORDS.findall(is_)
            assert ok, f"{key}, column {column + 2}: page {was!r}, now {is_!r}"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # four fits, 44 replays: about two CPU minutes, minutes under load
def test_the_pages_figures_still_hold() -> None:
    module = bench("real_gpu_twin")
    now = module.tables(module.measure())  # type: ignore[attr-defined]
    _check(rows(PAGE.read_text()), rows(now))
    within = re.findall(r"measured knee .*?: \d+ of \d+ figures", now)
    assert len(within) == len(module.STARTS)  # type: ignore[attr-defined]
    assert within == re.findall(r"measured knee .*?: \d+ of \d+ figures", PAGE.read_text())


def test_a_moved_figure_or_verdict_fails_the_check() -> None:
    page = rows(PAGE.read_text())
    wanted = {"current-rate-1", "current-rate-2_5", "older-rate-4", "current-knee-twin"}
    wanted |= {"catalogue-rate-1", "catalogue-rate-16", "catalogue-rate-inf", "cached-rate-16"}
    assert wanted <= page.keys()
    moved = {k: list(v) for k, v in page.items()}
    moved["current-rate-2"][0] = moved["current-rate-2"][0].replace("183 ms", "223 ms", 1)
    with pytest.raises(AssertionError, match="current-rate-2, column 2"):
        _check(page, moved)
    flipped = {k: list(v) for k, v in page.items()}
    flipped["current-rate-3"][4] = "yes / yes / yes"
    with pytest.raises(AssertionError, match="current-rate-3, column 6"):
        _check(page, flipped)
