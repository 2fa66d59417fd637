"""The twin and the real-time simulator agree: one workload, one preset, both ways."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.twin import capture, fit
from loadgen.stack.processes import simulator

PRESET = "llama-70b-bf16-tp4-a100"


def trace(path: Path, n: int, rate: float, seed: int = 5) -> None:
    """A Mooncake-format trace: Poisson arrivals, prompts of 600-1,500 tokens, no two
    sharing a block (so neither engine's prefix cache has anything to find)."""
    rng = random.Random(seed)
    t, rows = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        rows.append(
            {
                "timestamp": round(t * 1000),
                "input_length": rng.randint(600, 1500),
                "output_length": rng.randint(20, 60),
                "hash_ids": [10_000 + 100 * i + b for b in range(3)],
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow
def test_the_virtual_clock_and_the_real_time_simulator_agree(tmp_path: Path) -> None:
    trace(tmp_path / "trace.jsonl", 80, 4.0)
    with simulator("--preset", PRESET) as url:
        argv = ["--target", url, "--replay", str(tmp_path / "trace.jsonl")]
        assert main([*argv, "--out", str(tmp_path / "run"), "--no-progress", "--seed", "3"]) == 0
    served = capture.read([str(tmp_path / "run")])
    assert len(served.requests) == 80
    timings = twin.run(presets.load(PRESET), fit.requests(served)).timings
    for kind in ("ttft", "tpot"):
        real = statistics.median(getattr(r, kind) for r in served.requests)
        virtual = statistics.median(getattr(t, kind) for t in timings)
        assert virtual == pytest.approx(real, rel=0.05), kind


def test_a_loadgen_run_directory_is_a_capture_without_its_warmup_targets(tmp_path: Path) -> None:
    lines = [
        {
            "request_id": f"r{i}",
            "target": "proxy" if i % 2 else "direct",
            "intended_at": 1000.0 + i,
            "sent_at": 1000.001 + i,
            "ok": True,
            "excluded": "warmup" if i < 10 else None,
            "input_tokens": 100 + i,
            "output_tokens": 10,
            "cached_tokens": 64 if i > 50 else None,
            "ttft_s": 0.1,
            "tpot_s": 0.02,
            "server_queue_s": 0.001,
            "server_ttft_s": 0.09,
            "server_decode_s": 0.18,
        }
        for i in range(120)
    ]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = capture.read([str(tmp_path)])
    direct = [x for x in lines if x["target"] == "direct"]  # the first line's target
    assert len(got.requests) == len(direct) and got.model is None
    assert [r.measured for r in got.requests[:6]] == [False] * 5 + [True]
    assert got.requests[0].arrival == 0 and got.requests[1].arrival == pytest.approx(2.0)
    last = got.requests[-1]
    assert (last.cached_tokens, last.server_prefill, last.server_decode) == (64, 0.09, 0.18)
