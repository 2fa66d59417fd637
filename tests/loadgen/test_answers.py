"""Answers checked under load, end to end: loadgen against a model that answers a known share
of the canaries right (real uvicorn on loopback), and compare's verdict between two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.analysis import evals
from loadgen.commands.cli import main
from loadgen.runs import rundir
from tests.support.answering_upstream import serve

QUICK = ["--warmup", "0", "--no-progress", "--concurrency", "16", "--seed", "3"]
ITEMS = evals.BUILTIN_ITEMS


def run(url: str, out: Path, *more: str, requests: int = ITEMS) -> dict:
    argv = ["--target", url, "--eval", "builtin:arithmetic", "--requests", str(requests)]
    assert main([*argv, "--out", str(out), *QUICK, *more]) == 0
    return rundir.read_summary(out)


def test_accuracy_counts_exactly_the_right_answers_and_its_interval_holds_the_share(
    tmp_path: Path,
) -> None:
    with serve(seed=1, share=0.7) as upstream:
        (t,) = run(upstream.url, tmp_path / "run")["targets"].values()
    q = t["quality"]
    answered = evals.load("builtin:arithmetic", seed=3)[: q["items"]]
    assert q["items"] >= ITEMS * 0.9  # warm-up none: every measured request is an item
    assert q["correct"] == upstream.expected_correct(answered)
    assert q["interval"][0] <= 0.7 <= q["interval"][1]
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["eval_id"].startswith("arithmetic-") and record["correct"] in (True, False)
    assert record["content"] is None and "Compute" not in "".join(lines)  # no text written
    assert "cost" not in t and "energy" not in t and "consistency" not in t  # absent, not 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "### Answers and cost" in report and f"of {q['items']} items; 95% CI" in report
    rows = [line for line in report.splitlines() if line.startswith("| answer TTFT |")]
    assert rows == []  # the metric row is TTFT's twin when nothing reasoned
    assert "Answers and cost" in (tmp_path / "run" / "report.html").read_text()


def test_compare_calls_a_20_point_drop_dropped_and_none_held_or_cannot_tell(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with serve(seed=1, share=0.9) as good, serve(seed=1, share=0.7) as worse:
        priced = ("--gpu-hour-price", "2", "--gpus", "4")
        run(good.url, tmp_path / "good", *priced, requests=120)
        run(worse.url, tmp_path / "worse", *priced, requests=120)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "good"), str(tmp_path / "worse")]) == 0
    dropped = capsys.readouterr().out
    assert "accuracy is 2" in dropped and "points lower than" in dropped, dropped
    assert "): dropped" in dropped
    assert main(["compare", str(tmp_path / "good"), str(tmp_path / "good")]) == 0  # 0 points
    same = capsys.readouterr().out
    verdicts = [line for line in same.splitlines() if "accuracy" in line]
    assert verdicts == [] or "cannot tell with" in verdicts[0], same  # [] when held
    summary = rundir.read_summary(tmp_path / "good")
    (t,) = summary["targets"].values()
    assert t["cost"]["usd_per_mtok_output"] > 0 and t["cost"]["usd_per_hour"] == 8


@pytest.mark.parametrize(
    ("line", "flags", "said"),
    [
        ('{"prompt": "p"}', [], "items.jsonl:2: needs an answer"),
        ('{"prompt": "p", "answer": "(", "match": "regex"}', [], "items.jsonl:2: the answer's"),
        ('{"prompt": "p", "answer": "x", "match": "fuzzy"}', [], "items.jsonl:2: unknown match"),
        ("not json", [], "items.jsonl:2: not JSON"),
    ],
)
def test_bad_eval_input_stops_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture, line: str, flags: list[str], said: str
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"prompt": "fine", "answer": "1"}\n' + line + "\n")
    out = tmp_path / "run"
    argv = ["--target", "http://127.0.0.1:9", "--eval", str(items), "--out", str(out), *flags]
    assert main(argv) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()


def test_a_regex_that_backtracks_is_cut_off_and_the_run_writes_its_results(
    tmp_path: Path,
) -> None:
    """(a|aa)+$ against sixty a's and a '!' backtracks for hours: the item is marked timed
    out, the other item is judged, and the run ends and writes (it used to hang past SIGTERM)."""
    word = "a" * 60 + "!"
    prompt = [{"role": "user", "content": f"Repeat this string exactly, with nothing else: {word}"}]
    items = tmp_path / "items.jsonl"
    items.write_text(
        json.dumps({"id": "slow", "messages": prompt, "answer": "(a|aa)+$", "match": "regex"})
        + "\n"
        + json.dumps({"id": "fine", "messages": prompt, "answer": "a+!$", "match": "regex"})
        + "\n"
    )
    out = tmp_path / "run"
    with serve(seed=1, share=1.0) as upstream:
        argv = ["--target", upstream.url, "--eval", str(items), "--requests", "4"]
        done = subprocess.run(
            [sys.executable, "-m", "loadgen", *argv, "--out", str(out), *QUICK],
            capture_output=True, text=True, timeout=90,
        )
    assert done.returncode == 0, done.stderr
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [r for line in lines if (r := json.loads(line))["ok"]]  # not a cut cooldown one
    verdicts = {(r["eval_id"], r["correct"], r["eval_timed_out"]) for r in records}
    assert verdicts == {("slow", None, True), ("fine", True, None)}
    (t,) = rundir.read_summary(out)["targets"].values()
    slow = sum(1 for r in records if r["eval_id"] == "slow")
    assert t["quality"]["items"] == 1 and t["quality"]["timed_out"] == slow
    said = f" answers; {slow} answers not judged: the item's regex ran past 0.1 s"
    assert said in (out / "report.md").read_text()
