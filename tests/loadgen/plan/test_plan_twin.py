"""`plan --twin FITTED.toml`: a candidate on the fitted preset's GPU and model is predicted
with the twin itself, one of its model on another GPU with its efficiencies carried over;
each says so, and how far it may be off. Checked before any search."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from loadgen.commands import plan as plan_command
from loadgen.commands.cli import build_parser, capacity_request, config_from
from loadgen.engine import virtual
from loadgen.plan import basis, bounds, space
from loadgen.sim.model import presets

CONFIGS = Path(__file__).parents[2] / "sim" / "model" / "configs"
FIT = {"error": 0.04, "ttft_p50": 0.01, "ttft_p90": -0.03, "tpot_p50": 0.02, "tpot_p90": 0.06}


def test_the_twin_on_its_gpu_and_carried_to_another(tmp_path: Path) -> None:
    fitted = dataclasses.replace(presets.load("llama-70b-awq-tp4-a100"), name="mine", fit=FIT)
    twin = tmp_path / "mine.toml"
    twin.write_text(presets.dump(fitted))
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": i * 250, "input_length": 512, "output_length": 64} for i in range(80)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--replay", str(trace), "--slo", "tpot=50ms@p90", "--twin", str(twin)]
    argv += ["--models", "llama-70b-awq-tp4-a100", "--gpu-types", "a100,h100"]
    argv += ["--tensor-parallel", "4", "--dtypes", "awq", "--gpu-prices", "a100=1.8,h100=3"]
    argv += ["--out", str(tmp_path / "plan")]
    args = build_parser(plan=True).parse_args(argv)
    config = config_from(args, ["plan", *argv])
    plan = plan_command.settings(args, argv, None, capacity_request)
    entries, _traffic, _bound, written = plan_command.prepare(config, plan)
    by_gpu = {e["gpu"]: e for e in entries}
    own, other = by_gpu["a100-sxm-80gb"], by_gpu["h100-sxm"]
    assert own["spec"] == f"virtual:{twin}"
    assert own["basis"]["kind"] == "fitted"
    assert other["basis"]["kind"] == "carried" and other["carried_from"] == "a100-sxm-80gb"
    assert other["basis"]["said"].startswith("carried over from a fit on a100-sxm-80gb")
    # no binding SLO known before the search: the fit's mean error, plus 15% and the search's 5%
    assert abs(other["basis"]["uncertainty"] - (0.04 + basis.CARRIED + 0.05)) < 1e-9
    carried = written[other["spec"].removeprefix("virtual:")]
    assert carried.perf.efficiency == fitted.perf.efficiency
    assert carried.perf.hardware.gpu == "NVIDIA H100 80GB HBM3"
    assert not (tmp_path / "plan").exists()  # nothing written before the searches


def test_a_binding_slo_the_fit_checked_is_what_it_rests_on() -> None:
    fitted = dataclasses.replace(presets.load("llama-70b-awq-tp4-a100"), fit=FIT)
    said = basis.of(fitted, False, {"metric": "tpot", "percentile": "p90"})
    assert said["kind"] == "fitted" and abs(said["uncertainty"] - 0.11) < 1e-9
    assert said["said"] == "fitted on this GPU (held-out error 6.0% on TPOT P90)"
    bundled = basis.of(presets.load("llama-70b-awq-tp4-a100"), True, None)
    assert bundled["kind"] == "bundled" and abs(bundled["uncertainty"] - 0.15) < 1e-9
    datasheet = basis.of(presets.load("ascend-910b-llama-70b-int8-tp8"), True, None)
    assert datasheet["kind"] == "datasheet"


def test_the_founding_plan_file_names_five_deployments_that_fit() -> None:
    root = Path(__file__).resolve().parents[3]
    found = space.read(str(root / "examples" / "plan-founding.toml"))
    assert len(found.candidates) == 5
    for c in found.candidates:
        assert c.base is not None
        preset, why = bounds.fit(c.base, c.args)
        assert preset is not None, (c.name, why)
    gpus = sorted({(c.gpu, c.usd_per_gpu_hour) for c in found.candidates})
    assert gpus == [("a100-sxm-80gb", 1.8), ("ascend-910b", 1.2)]


def test_a_twin_fitted_to_a_config_json_model(tmp_path: Path) -> None:
    config = tmp_path / "Meta-Llama-3-8B" / "config.json"
    config.parent.mkdir()
    config.write_text((CONFIGS / "llama-3-8b.json").read_text())
    derived = virtual.preset("virtual:", f"--gpu h100 --model-config {config} --dtype bf16")
    twin = tmp_path / "mine.toml"
    twin.write_text(presets.dump(dataclasses.replace(derived, fit=FIT)))
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": i * 250, "input_length": 512, "output_length": 64} for i in range(80)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--replay", str(trace), "--slo", "tpot=50ms@p90", "--twin", str(twin)]
    argv += ["--models", str(config), "--gpu-types", "h100,l40s", "--tensor-parallel", "1"]
    argv += ["--dtypes", "bf16", "--gpu-prices", "h100=3,l40s=1", "--out", str(tmp_path / "p")]
    args = build_parser(plan=True).parse_args(argv)
    plan = plan_command.settings(args, argv, None, capacity_request)
    entries, _traffic, _bound, written = plan_command.prepare(config_from(args, argv), plan)
    by_gpu = {e["gpu"]: e for e in entries}
    own, other = by_gpu["h100-sxm"], by_gpu["l40s"]
    # the twin replaces the catalogue's model: its file alone, no --model-config beside it
    assert (own["spec"], own["args"], own["basis"]["kind"]) == (f"virtual:{twin}", "", "fitted")
    assert other["basis"]["kind"] == "carried" and other["args"] == ""
    carried = written[other["spec"].removeprefix("virtual:")]
    assert carried.perf.model == derived.perf.model
    assert carried.perf.efficiency == presets.load_file(twin).perf.efficiency
    assert carried.perf.hardware.gpu == "NVIDIA L40S"
