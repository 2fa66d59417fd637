"""A preset no measurement backs says so (`uncalibrated`), and the simulator and the docs'
preset table pass it on; the Ascend 910B preset is one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.sim.model import presets
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.vllm_flags.table import parse_text

ASCEND = "ascend-910b-llama-70b-int8-tp8"
ROOT = Path(__file__).resolve().parents[2]


def test_the_ascend_preset_is_a_datasheet_estimate_that_says_so() -> None:
    ascend = presets.load(ASCEND)
    hw = ascend.perf.hardware
    assert (hw.tensor_parallel, hw.peak_flops, hw.hbm_bandwidth) == (8, 353.9e12, 1.6e12)
    assert "datasheet estimate" in ascend.uncalibrated
    assert ascend.warning.startswith(f"preset {ASCEND} is not calibrated against any measurement")
    _applied, warnings = apply_flags(ascend, parse_text("--max-model-len 2048"))
    assert warnings[0] == ascend.warning


def test_a_calibrated_preset_warns_of_nothing() -> None:
    qwen = presets.load("qwen-72b-bf16-tp4-a100")
    assert qwen.uncalibrated == "" and qwen.warning == ""
    assert apply_flags(qwen, parse_text(""))[1] == []


def test_the_simulator_prints_it_before_serving() -> None:
    """Started with the Ascend preset and a port already taken, it warns, then fails to bind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "loadgen.sim", "--preset", ASCEND, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
        )
    assert f"preset {ASCEND} is not calibrated" in result.stderr.splitlines()[0]


def test_the_docs_preset_table_marks_it() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    rows = hooks.preset_table(presets.load).splitlines()
    assert any(row.startswith(f"| `{ASCEND}` (not calibrated) |") for row in rows)
    assert any(row.startswith("| `qwen-72b-bf16-tp4-a100` |") for row in rows)


@pytest.mark.parametrize("value", [3, True])
def test_uncalibrated_must_say_why(tmp_path: Path, value: object) -> None:
    text = (ROOT / "loadgen/sim/presets/qwen-72b-bf16-tp4-a100.toml").read_text()
    path = tmp_path / "p.toml"
    path.write_text(f"uncalibrated = {str(value).lower()}\n{text}")
    with pytest.raises(ValueError, match="uncalibrated: expected a non-empty string"):
        presets.load_file(path)
