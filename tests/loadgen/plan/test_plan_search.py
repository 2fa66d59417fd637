"""`python -m loadgen plan` on the simulator's twin: a candidate's figure is the capacity
command's, typed by hand with the same flags and seed (a preset's, or a config.json's on a
catalogue GPU); and the cheapest the plan finds is the cheapest a brute-force sweep of the
twin finds (or one it says it cannot tell apart), with a hidden preset file standing in for
a GPU no bundled preset describes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.commands import replicas
from loadgen.commands.cli import build_parser, main
from loadgen.sim import twin
from loadgen.sim.model import presets

SLO = ["--slo", "ttft=800ms@p90", "--slo", "tpot=50ms@p90"]
CONFIGS = Path(__file__).parents[2] / "sim" / "model" / "configs"
RATE = 4.0  # the trace's requests/s
LENGTHS = (512, 64)


def write_trace(path: Path, requests: int = 160, rate: float = RATE) -> Path:
    rows = [
        {"timestamp": i * 1000 / rate, "input_length": LENGTHS[0], "output_length": LENGTHS[1]}
        for i in range(requests)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def plan(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "plan"
    assert main(["plan", *SLO, "--seed", "3", "--jobs", "2", "--out", str(out), *flags]) == 0
    return json.loads((out / "plan.json").read_text())


def typed_by_hand(tmp_path: Path, entry: dict, trace: Path, target: list[str]) -> None:
    """Each of the candidate's searches, run as `capacity` typed by hand on `target`, finds
    the same figures."""
    for search in entry["searches"]:
        by_hand = tmp_path / f"by-hand-{search['replicas']}"
        argv = ["capacity", *target, "--by", "speed"]
        argv += ["--virtual-replicas", str(search["replicas"]), "--replay", str(trace), *SLO]
        for flag in ("--start", "--floor", "--ceiling"):  # a count checked: held to one level
            if flag in search["argv"]:
                argv += [flag, search["argv"][search["argv"].index(flag) + 1]]
        argv += ["--seed", "3", "--out", str(by_hand)]
        assert main(argv) == 0
        (t,) = json.loads((by_hand / "capacity.json").read_text())["targets"].values()
        for figure in ("capacity", "bracket", "binding", "output_tokens_per_s"):
            assert t[figure] == search[figure], figure
        assert len(t["probes"]) == search["probes"]
        if search["kind"] == "check":  # told by its one level alone
            start = float(argv[argv.index("--start") + 1])
            assert {p["level"] for p in t["probes"]} == {start}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_candidates_figure_is_the_capacity_command_typed_by_hand(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", 60, rate=6.0)  # more than one replica holds
    one = tmp_path / "plan.toml"
    one.write_text('presets = ["llama-70b-awq-tp4-a100"]\n[prices]\na100 = 1.8\n')
    result = plan(tmp_path, "--replay", str(trace), "--candidates", str(one))
    by_name = {e["name"]: e for e in result["candidates"]}
    entry = by_name["llama-70b-awq-tp4-a100"]
    assert entry["status"] == "ranked"
    typed_by_hand(tmp_path, entry, trace, ["--target", "virtual:llama-70b-awq-tp4-a100"])
    # the replicas it priced at hold the traffic, searched in full; one fewer fell short
    full = {s["replicas"]: s["share"] for s in entry["searches"] if s["kind"] == "search"}
    short = {s["replicas"] for s in entry["searches"] if (s["share"] or 0) < 1}
    assert entry["replicas"] >= 2 and 1 in full
    assert full[entry["replicas"]] >= 1 and entry["replicas"] - 1 in short


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_config_json_candidates_figure_is_the_capacity_command_typed_by_hand(
    tmp_path: Path,
) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", 60, rate=6.0)
    config = tmp_path / "Meta-Llama-3-8B" / "config.json"
    config.parent.mkdir()
    config.write_text((CONFIGS / "llama-3-8b.json").read_text())
    one = tmp_path / "plan.toml"
    one.write_text(
        '[space]\nmodels = [{model_config = "Meta-Llama-3-8B/config.json"}]\n'
        'gpus = ["h100"]\ndtypes = ["fp8"]\ntensor_parallel = [1]\n[prices]\nh100 = 3.0\n'
    )
    result = plan(tmp_path, "--replay", str(trace), "--candidates", str(one))
    (entry,) = result["candidates"]
    assert entry["name"] == "Meta-Llama-3-8B-fp8-tp1-h100-sxm"
    assert entry["status"] == "ranked" and entry["searches"]
    model = f"--model-config {config} --gpu h100 --dtype fp8 --tensor-parallel-size 1"
    typed_by_hand(tmp_path, entry, trace, ["--target", "virtual:", "--virtual-args", model])


def hidden_gpu(tmp_path: Path) -> Path:
    """A GPU no bundled preset describes: the AWQ LLaMA on two cards with 60% of an A100's
    bandwidth, 48 GiB each, and its own efficiencies: a preset file under a neutral name."""
    base = presets.load("llama-70b-awq-tp4-a100")
    hw = dataclasses.replace(
        base.perf.hardware,
        gpu="NVIDIA L40S",
        tensor_parallel=2,
        hbm_bandwidth=0.6 * base.perf.hardware.hbm_bandwidth,
        gpu_memory=48 * 2**30,
    )
    eff = dataclasses.replace(base.perf.efficiency, mbu=0.5, host_overhead=0.002)
    hidden = dataclasses.replace(
        base, name="hidden", perf=dataclasses.replace(base.perf, hardware=hw, efficiency=eff)
    )
    path = tmp_path / "hidden.toml"
    path.write_text(presets.dump(hidden))
    return path


def meets(preset: presets.Preset, arrivals: list[float], replicas: int) -> bool:
    """The twin, run directly on the trace with `replicas`, meets both SLOs at P90."""
    requests = [twin.Request(a, *LENGTHS) for a in arrivals]
    timings = twin.run(preset, requests, replicas).timings
    ttft = np.percentile([t.ttft for t in timings], 90)
    tpot = np.percentile([t.tpot for t in timings if t.tpot is not None], 90)
    return bool(ttft <= 0.8 and tpot <= 0.05)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_cheapest_is_a_brute_force_sweeps(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", 240)
    hidden = hidden_gpu(tmp_path)
    plan_toml = tmp_path / "plan.toml"
    names = ["llama-70b-awq-tp4-a100", "qwen-72b-gptq-tp4-a100", "llama-2-70b-fp16-tp4-h100"]
    plan_toml.write_text(
        f"presets = {json.dumps([*names, str(hidden)])}\nmax_replicas = 6\n"
        "[prices]\na100 = 1.8\nh100 = 3.0\nl40s = 0.6\n"
    )
    result = plan(tmp_path, "--replay", str(trace), "--candidates", str(plan_toml))
    arrivals = [i / RATE for i in range(240)]
    costs = {}
    for e in result["candidates"]:
        spec = e["spec"].removeprefix("virtual:")
        preset = presets.load_file(spec) if spec.endswith(".toml") else presets.load(spec)
        fewest = next((n for n in range(1, 7) if meets(preset, arrivals, n)), None)
        if fewest is not None:
            costs[e["name"]] = fewest * e["gpus"] * e["usd_per_gpu_hour"]
    truth = min(costs, key=costs.__getitem__)
    by_name = {e["name"]: e for e in result["candidates"]}
    cheapest = by_name[result["ranking"][0]]
    low, high = cheapest["usd_per_hour_range"]
    assert cheapest["name"] == truth or (
        truth in cheapest["tied_with"] and low <= costs[truth] <= high
    ), (truth, costs, cheapest["name"], cheapest["usd_per_hour_range"])
    assert result["sentence"].startswith(
        "Cheapest that meets TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90) on this traffic: "
    )


def level(search: dict, flag: str = "--start") -> str:
    return search["argv"][search["argv"].index(flag) + 1]


def test_each_search_keeps_its_own_folder(tmp_path: Path) -> None:
    """One replica that falls short of the traffic costs one probe, counts are checked from
    two, and when the bound falls short too one replica is checked at 1/(8 x the bound) of
    the traffic: it holds that, so the candidate needs more replicas than the bound. Each
    count searched is written to a folder of its own, and each entry's folder holds its own
    figures."""
    trace = write_trace(tmp_path / "trace.jsonl", 240, rate=60.0)
    one = tmp_path / "plan.toml"
    one.write_text('presets = ["llama-70b-awq-tp4-a100"]\nmax_replicas = 2\n[prices]\na100 = 1.8\n')
    (entry,) = plan(tmp_path, "--replay", str(trace), "--candidates", str(one))["candidates"]
    assert entry["status"] == "over_bound" and "more than 2 replicas" in entry["reason"]
    dirs = [s["dir"] for s in entry["searches"]]
    assert len(set(dirs)) == len(dirs), dirs
    first, alone, two = entry["searches"]
    assert (first["replicas"], first["kind"], first["probes"], first["share"]) == (
        1, "search", 1, None
    )  # fmt: skip
    assert level(first) == level(first, "--floor") == "1"
    assert (alone["replicas"], alone["kind"], level(alone)) == (1, "check", "0.0625")
    assert alone["share"] == 0.0625
    assert (two["replicas"], two["kind"], two["share"]) == (2, "check", None)
    for search in entry["searches"]:
        (t,) = json.loads((Path(search["dir"]) / "capacity.json").read_text())["targets"].values()
        assert (t["capacity"], t["bracket"]) == (search["capacity"], search["bracket"])
        assert "--no-probe-pngs" in search["argv"]  # a plan's probes are drawn in HTML only
        assert not list(Path(search["dir"]).glob("probe-*/*.png"))
        assert list(Path(search["dir"]).glob("probe-*/report.html"))


def test_a_candidate_that_misses_unloaded_meets_the_slos_at_no_size(tmp_path: Path) -> None:
    """A TTFT no replica reaches even alone with its prompt: every count up to the bound
    falls short, and one replica at 1/(8 x the bound) of the traffic too; the candidate
    meets the SLOs at no size, in the words of that last check."""
    trace = write_trace(tmp_path / "trace.jsonl", 240)
    one = tmp_path / "plan.toml"
    one.write_text('presets = ["llama-70b-awq-tp4-a100"]\nmax_replicas = 2\n[prices]\na100 = 1.8\n')
    out = tmp_path / "plan"
    argv = ["plan", "--slo", "ttft=5ms@p90", "--slo", "tpot=50ms@p90", "--seed", "3"]
    argv += ["--replay", str(trace), "--candidates", str(one), "--jobs", "1", "--out", str(out)]
    assert main(argv) == 0
    (entry,) = json.loads((out / "plan.json").read_text())["candidates"]
    assert entry["status"] == "cannot_meet", entry["reason"]
    alone = entry["searches"][1]
    assert (alone["replicas"], alone["kind"], level(alone), alone["share"]) == (
        1, "check", "0.0625", None
    )  # fmt: skip
    assert entry["reason"] == f"meets the SLOs at no size: {alone['reason']}"
    assert [s["share"] for s in entry["searches"]] == [None, None, None]
    report = (out / "plan.md").read_text()
    assert "1 replica: falls short of 1x, " in report
    assert "1 replica: falls short of 0.0625x (checked at that level alone)" in report


@pytest.mark.parametrize("given, drawn", [([], False), (["--probe-pngs"], True)])
def test_a_plans_probes_draw_pngs_only_when_asked(given: list[str], drawn: bool) -> None:
    job = replicas.Job(
        name="c",
        spec="virtual:c",
        args="",
        argv=("--replay", "t.jsonl", *given, "--jobs", "2"),
        out=Path("plan"),
        rate=None,
        headroom=0.0,
        max_replicas=4,
        request=lambda argv: 2,
    )
    argv = replicas.capacity_argv(job, 1, 1.0, 0.5)
    args = build_parser(search=True).parse_args(argv[1:])
    assert (args.probe_pngs is not False) is drawn
