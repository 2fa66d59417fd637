"""examples/traces/fit_source_proxy_log.py: a benchmark tool's file turned into the proxy's
log lines reads back as the same requests, and a file the fit cannot read is one line,
exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadgen.replay import formats
from loadgen.sim.twin import capture
from tests.sim.twin.test_whatifs import ROOT

CONVERT = ROOT / "examples" / "traces" / "fit_source_proxy_log.py"
PUBLISHED = ROOT / "docs" / "sim" / "llama-3.3-70b-tp8-a100" / "rate-4.json"


def _convert(source: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(CONVERT), source, *flags], capture_output=True, cwd=ROOT, timeout=120
    )


def test_a_vllm_bench_file_reads_back_as_its_requests(tmp_path) -> None:
    done = _convert(str(PUBLISHED))
    assert done.returncode == 0, done.stderr
    log = tmp_path / "rate-4.log"
    log.write_bytes(done.stdout)
    was, now = capture.read([str(PUBLISHED)]), capture.read([str(log)])
    assert len(now.requests) == len(was.requests) == 200
    assert now.model == was.model == "meta-llama/Llama-3.3-70B-Instruct"
    for a, b in zip(was.requests, now.requests, strict=True):
        assert (b.prompt_tokens, b.output_tokens) == (a.prompt_tokens, a.output_tokens)
        assert b.arrival == pytest.approx(a.arrival, abs=1e-5)
        assert b.ttft == pytest.approx(a.ttft, abs=1e-5)
        assert (b.tpot is None) == (a.tpot is None)
        assert b.tpot is None or b.tpot == pytest.approx(a.tpot, abs=1e-5)
    # and --replay reads it: the same arrivals and lengths, in order
    parsed = formats.parse(log.read_text())
    assert parsed.format == "proxy"
    assert [r.input_tokens for r in parsed.records] == [r.prompt_tokens for r in was.requests]


def test_cached_prompts_keep_what_vllm_prefills_of_them() -> None:
    done, cached = _convert(str(PUBLISHED)), _convert(str(PUBLISHED), "--prompts-cached")
    assert cached.returncode == 0, cached.stderr
    was = [json.loads(line) for line in done.stdout.splitlines()]
    now = [json.loads(line) for line in cached.stdout.splitlines()]
    assert len(now) == len(was) == 200
    for a, b in zip(was, now, strict=True):
        whole = (a["input_tokens"] - 1) // 16 * 16  # vLLM's whole blocks, the last token kept
        assert b["input_tokens"] == a["input_tokens"] - whole
        assert 1 <= b["input_tokens"] <= 16
        assert {k: v for k, v in b.items() if k != "input_tokens"} == {
            k: v for k, v in a.items() if k != "input_tokens"
        }
    assert sum(a["input_tokens"] for a in was) > 10 * sum(b["input_tokens"] for b in now)


def test_a_file_the_fit_cannot_read_is_one_line_and_exit_2(tmp_path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    done = _convert(str(bad))
    assert done.returncode == 2
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert str(bad) in line
