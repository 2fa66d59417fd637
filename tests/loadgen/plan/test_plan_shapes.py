"""A plan over a model named by its Hugging Face config.json: each candidate is the preset
`--target virtual: --virtual-args "--gpu … --model-config … --dtype … -tp N"` builds, typed
by hand; one too big for its GPUs is listed as not fitting, with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.engine import virtual
from loadgen.plan import bounds, space

CONFIGS = Path(__file__).parents[2] / "sim" / "model" / "configs"
SLO = ["--slo", "ttft=800ms@p90", "--slo", "tpot=50ms@p90"]


def checkout(tmp_path: Path, folder: str, config: str) -> Path:
    """A model's checkout as Hugging Face lays it out: FOLDER/config.json."""
    path = tmp_path / "models" / folder / "config.json"
    path.parent.mkdir(parents=True)
    shutil.copy(CONFIGS / f"{config}.json", path)
    return path


def test_each_candidate_is_the_preset_the_virtual_target_builds(tmp_path: Path) -> None:
    config = checkout(tmp_path, "Meta-Llama-3-8B", "llama-3-8b")
    plan = tmp_path / "plan.toml"  # the path is PLAN.toml's folder's
    plan.write_text(
        '[space]\nmodels = [{model_config = "models/Meta-Llama-3-8B/config.json"}]\n'
        'gpus = ["h100", "l40s"]\ndtypes = ["bf16", "fp8"]\ntensor_parallel = [1, 2]\n'
        "[vary]\nmax_num_seqs = [64, 256]\n[prices]\nh100 = 3.0\nl40s = 1.0\n"
    )
    found = space.read(str(plan)).candidates
    assert len(found) == 2 * 2 * 2 * 2
    for c in found:
        # typed by hand: the catalogue's alias, -tp, the engine flag after
        seqs = c.engine_args.split()[-1]
        args = f"--model-config {config} --gpu {c.gpu} --dtype {c.dtype} -tp {c.tensor_parallel}"
        by_hand = virtual.preset("virtual:", f"{args} --max-num-seqs {seqs}")
        assert c.spec == "virtual:" and c.base is not None, c.name
        applied, why = bounds.fit(c.base, c.args)
        assert applied == by_hand and why == "", c.name
        assert bounds.tpot_floor(applied) == bounds.tpot_floor(by_hand)
        assert c.name == f"Meta-Llama-3-8B-{c.dtype}-tp{c.tensor_parallel}-{c.gpu} {c.engine_args}"
    model = found[0].base.perf.model if found[0].base else None
    assert model is not None
    # Meta-Llama-3-8B as published: 8,030,261,248 parameters, 32 layers, GQA of 8 KV heads
    assert (model.params, model.layers, model.heads, model.kv_heads) == (8_030_261_248, 32, 32, 8)
    assert model.max_position_embeddings == 8192


def test_a_config_on_the_command_line_and_a_mixture_of_experts(tmp_path: Path) -> None:
    config = checkout(tmp_path, "Mixtral-8x7B-v0.1", "mixtral-8x7b")
    asked = space.Asked(
        models=(str(config),),  # --models PATH: a config.json by its path
        gpu_types=("h100",),
        dtypes=("bf16",),
        tensor_parallel=(2,),
        prices="h100=3",
    )
    (c,) = space.read(None, asked).candidates
    assert c.name == "Mixtral-8x7B-v0.1-bf16-tp2-h100-sxm"
    assert c.base is not None
    model = c.base.perf.model
    assert (model.experts, model.experts_per_token) == (8, 2)
    assert model.active_params < model.params / 3  # two of eight experts a token


def test_a_model_too_big_for_its_gpu_is_listed_with_the_reason(tmp_path: Path) -> None:
    checkout(tmp_path, "Qwen2.5-72B-Instruct", "qwen2.5-72b")
    checkout(tmp_path, "Meta-Llama-3-8B", "llama-3-8b")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[space]\nmodels = [{model_config = "models/Qwen2.5-72B-Instruct/config.json"},\n'
        '  {model_config = "models/Meta-Llama-3-8B/config.json"}]\n'
        'gpus = ["l4"]\ndtypes = ["bf16"]\ntensor_parallel = [1]\n[prices]\nl4 = 0.8\n'
    )
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": i * 250, "input_length": 512, "output_length": 64} for i in range(120)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "plan"
    argv = ["plan", "--replay", str(trace), *SLO, "--jobs", "1", "--candidates", str(plan)]
    assert main([*argv, "--out", str(out)]) == 0
    by_name = {e["name"]: e for e in json.loads((out / "plan.json").read_text())["candidates"]}
    qwen = by_name["Qwen2.5-72B-Instruct-bf16-tp1-l4"]
    assert qwen["status"] == "does_not_fit"
    # 72.7 billion parameters of two bytes on one 24 GB L4
    assert qwen["reason"] == (
        "the weights do not fit in GPU memory: 135.4 GiB of weights per GPU, 22 GiB each"
    )
    # the 8B fits on one L4, and its weights streamed once a step already miss the TPOT
    llama = by_name["Meta-Llama-3-8B-bf16-tp1-l4"]
    assert llama["status"] == "cannot_meet" and "weights 15.0 GiB per GPU" in llama["memory"]
    assert llama["spec"] == "virtual:" and "--model-config" in llama["args"]


def test_a_varied_tensor_parallel_size_is_the_config_candidates_own(tmp_path: Path) -> None:
    """[vary] tensor_parallel_size on a config.json model: each candidate is built on the
    varied count, named by it, and its --virtual-args say it once (not the axis's and then
    the varied one), so the command typed by hand is unambiguous."""
    config = checkout(tmp_path, "Meta-Llama-3-8B", "llama-3-8b")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[space]\nmodels = [{model_config = "models/Meta-Llama-3-8B/config.json"}]\n'
        'gpus = ["h100"]\ndtypes = ["bf16"]\ntensor_parallel = [1, 2]\n'
        "[vary]\ntensor_parallel_size = [2, 4]\nmax_num_seqs = [64]\n[prices]\nh100 = 3.0\n"
    )
    found = space.read(str(plan)).candidates
    assert sorted(c.tensor_parallel for c in found) == [2, 4]
    for c in found:
        words = c.args.split()
        assert words.count("--tensor-parallel-size") + words.count("-tp") == 1, c.args
        assert c.name == f"Meta-Llama-3-8B-bf16-tp{c.tensor_parallel}-h100-sxm --max-num-seqs 64"
        args = f"--model-config {config} --gpu h100 --dtype bf16 -tp {c.tensor_parallel}"
        by_hand = virtual.preset("virtual:", f"{args} --max-num-seqs 64")
        assert c.base is not None
        applied, why = bounds.fit(c.base, c.args)
        assert applied == by_hand and why == "", c.name
        assert applied.perf.hardware.tensor_parallel == c.tensor_parallel


def test_a_varied_tensor_parallel_size_must_be_a_whole_number(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'presets = ["llama-70b-awq-tp4-a100"]\n[vary]\ntensor_parallel_size = ["four"]\n'
        "[prices]\na100 = 1.8\n"
    )
    with pytest.raises(ValueError, match=r"\[vary\] tensor_parallel_size takes whole numbers"):
        space.read(str(plan))
