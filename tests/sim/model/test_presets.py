"""A fitted preset carries its held-out error in a [fit] table: it reads back as written,
a bundled preset has none, and a [fit] table that is not one is refused, naming the key."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from loadgen.sim.model import presets

BASE = "llama-70b-bf16-tp4-a100"
FIT = {"error": 0.05, "ttft_p50": -0.02, "ttft_p90": 0.071, "tpot_p50": 0.01, "tpot_p90": 0.03}


def test_a_fit_table_reads_back_as_written() -> None:
    base = presets.load(BASE)
    assert base.fit is None
    fitted = dataclasses.replace(base, fit=FIT)
    text = presets.dump(fitted)
    assert "\n[fit]\nerror = 0.05\n" in text
    assert presets.parse(BASE, tomllib.loads(text)) == fitted


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("ttft_p90 = 0.1", "[fit] takes error and"),
        ("error = 0.1\nttft_p99 = 0.2", "[fit] takes error and"),
        ('error = "7%"', "[fit] error = '7%' is not a finite number"),
        ("error = nan", "[fit] error = nan is not a finite number"),
    ],
)
def test_a_bad_fit_table_is_refused(table: str, words: str) -> None:
    text = presets.dump(presets.load(BASE)) + f"\n[fit]\n{table}\n"
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        presets.parse("mine", tomllib.loads(text))
