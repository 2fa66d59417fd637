"""Per-slice SLO verdicts from a real replay: the scripted simulator freezes for 1.6 s just
after the third second of a steady trace, so the requests sent in slices 2 and 3 wait
behind the freeze and fail TTFT P90 ≤ 300 ms; every other slice answers in 20 ms."""

from __future__ import annotations

import json
from html import unescape
from pathlib import Path

from loadgen.commands.cli import main
from loadgen.runs import rundir
from tests.support.scripted_upstream import arrivals, control, running

RATE = 10  # requests/s: ten to a one-second slice, as many as a P90 needs
SECONDS = 6
STALL_S = 1.6  # from 2.05 s into the run: slice 2 waits it all, slice 3 until 3.65 s


def test_exactly_the_slices_behind_a_freeze_fail_ttft(tmp_path: Path) -> None:
    trace = tmp_path / "steady.jsonl"
    rows = [
        {"timestamp": 50 + i * 1000 / RATE, "input_length": 20, "output_length": 4}
        for i in range(RATE * SECONDS)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running(0.02, 0.01, {}) as url:
        control(url, stall_at=len(arrivals(url)) + 2 * RATE + 1, stall_s=STALL_S)
        argv = ["--target", url, "--replay", str(trace), "--slice", "1s", "--no-progress"]
        argv += ["--slo", "ttft=300ms@p90", "--slo", "tpot=50ms@p90", "--out", str(tmp_path / "r")]
        assert main(argv) == 0
    (target,) = rundir.read_summary(tmp_path / "r")["targets"].values()
    found = target["slices"]
    assert [s["sent"] for s in found] == [RATE] * SECONDS
    verdicts = {s["start_s"]: s["slo"]["ttft"]["verdict"] for s in found}
    assert verdicts == {0.0: "pass", 1.0: "pass", 2.0: "fail", 3.0: "fail", 4.0: "pass",
                        5.0: "pass"}  # fmt: skip
    assert found[2]["slo"]["ttft"]["value_s"] > 1.0  # most of the freeze, at P90
    assert all(s["slo"]["tpot"]["verdict"] == "pass" for s in found)  # the freeze is before
    report = (tmp_path / "r" / "report.md").read_text()
    assert "SLOs held in 4 of 6 slices; TTFT P90 failed in 0:02–0:04 (2 slices, worst " in report
    page = unescape((tmp_path / "r" / "report.html").read_text())
    assert "SLOs held in 4 of 6 slices" in page.split('id="figures"')[0]  # in the verdict
    timeline = page.split('id="chart-timeline-ttft"')[1].split("</figure>")[0]
    marked = [line for line in timeline.split("<rect") if "band alarm" in line]
    assert len(marked) == 2 and all("> 300 ms" in m for m in marked)
    assert "slice 0:02–0:03: TTFT P90" in timeline and "slice 0:03–0:04: TTFT P90" in timeline
