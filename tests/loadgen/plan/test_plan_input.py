"""`python -m loadgen plan`: input no plan can use is one line on stderr, exit 2, before any
search and with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.commands.cli import main

SLO = ["--slo", "ttft=800ms@p90", "--slo", "tpot=50ms@p90"]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    rows = [{"timestamp": i * 250, "input_length": 512, "output_length": 64} for i in range(120)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: Path, *flags: str) -> str:
    out = tmp_path / "plan"
    argv = ["plan", "--replay", str(trace), *SLO, "--jobs", "1", "--out", str(out), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists()
    return err


def plan_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return str(path)


def test_an_unknown_gpu(tmp_path, capsys, trace) -> None:
    err = refused(tmp_path, capsys, trace, "--gpu-types", "x100", "--gpu-prices", "a100=1.8")
    assert "unknown GPU 'x100'" in err and "a100-sxm-80gb" in err


@pytest.mark.parametrize("price", ["0", "nan", "-1", "inf"])
def test_a_price_that_is_not_a_positive_number(tmp_path, capsys, trace, price) -> None:
    err = refused(tmp_path, capsys, trace, "--gpu-prices", f"a100={price}")
    assert "--gpu-prices a100" in err and "not a positive number" in err


def test_a_nan_price_in_the_file(tmp_path, capsys, trace) -> None:
    plan = plan_file(tmp_path, 'presets = ["llama-70b-awq-tp4-a100"]\n[prices]\na100 = nan\n')
    err = refused(tmp_path, capsys, trace, "--candidates", plan)
    assert f"--candidates {plan}: [prices] a100" in err and "nan" in err


def test_a_gpu_without_a_price(tmp_path, capsys, trace) -> None:
    plan = plan_file(tmp_path, 'presets = ["llama-2-70b-fp16-tp4-h100"]\n[prices]\na100 = 2\n')
    err = refused(tmp_path, capsys, trace, "--candidates", plan)
    assert "no price for h100-sxm" in err


def test_a_space_without_a_bound(tmp_path, capsys, trace) -> None:
    seqs = ", ".join(str(n) for n in range(1, 1001))
    text = f"[vary]\nmax_num_seqs = [{seqs}]\nmax_num_batched_tokens = [{seqs}]\n"
    plan = plan_file(tmp_path, text + "[prices]\na100 = 1.8\n")
    err = refused(tmp_path, capsys, trace, "--candidates", plan)
    assert "holds 14,000,000 candidates" in err and "bound it" in err


def test_a_model_that_fits_nowhere(tmp_path, capsys, trace) -> None:
    flags = ["--models", "llama-70b-bf16-tp4-a100", "--gpu-types", "l4,a10g"]
    flags += ["--tensor-parallel", "1,2", "--dtypes", "bf16", "--gpu-prices", "l4=0.8,a10g=1"]
    err = refused(tmp_path, capsys, trace, *flags)
    assert "no candidate can serve the model" in err and "do not fit" in err


def test_a_window_too_small_for_the_slos(tmp_path, capsys, trace) -> None:
    flags = ["--duration", "5s", "--gpu-types", "a100", "--gpu-prices", "a100=1.8"]
    err = refused(tmp_path, capsys, trace, *flags)
    assert "the window holds 20 measured requests" in err


def test_neither_a_replay_nor_a_rate(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["plan", *SLO, "--gpu-prices", "a100=1.8", "--out", str(tmp_path / "p")])
    assert "the traffic is a --replay or a --rate" in capsys.readouterr().err


def test_traffic_as_a_rate_is_checked_alike(tmp_path, capsys) -> None:
    out = tmp_path / "plan"
    argv = ["plan", "--rate", "10", "--input-tokens", "512", "--output-tokens", "256", *SLO]
    assert main([*argv, "--gpu-prices", "a100=0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "loadgen plan: --gpu-prices a100: price 0.0 is not a positive number of USD per GPU-hour"
    )
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--workers", "--eval", "--gpu-metrics", "--gpu-hour-price"])
def test_what_a_twin_cannot_take_is_not_offered(tmp_path, capsys, trace, flag) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--replay", str(trace), flag, "2", "--out", str(tmp_path / "p")])
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-port", "ray://127.0.0.1:x"])
def test_a_ray_cluster_that_cannot_be_reached(tmp_path, capsys, trace, address) -> None:
    err = refused(
        tmp_path, capsys, trace, "--gpu-types", "a100", "--gpu-prices", "a100=1.8", "--ray", address
    )
    assert err.startswith(f"loadgen plan: --ray {address}: ")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "cannot read it as JSON ([Errno 2] No such file or directory"),
        ('{"hidden_size": 4096,', "cannot read it as JSON (Expecting"),
        ('{"hidden_size": 4096, "num_hidden_layers": 32}', "not a model's config.json: no "),
        ('{"text_config": {}}', "a multimodal model's config (text_config): not modelled"),
        ("[]", "not a model's config.json: not a JSON object"),
    ],
)
def test_a_config_json_that_names_no_model(tmp_path, capsys, trace, text, problem) -> None:
    config = tmp_path / "mine" / "config.json"
    if text is not None:
        config.parent.mkdir()
        config.write_text(text)
    space = '[space]\nmodels = [{model_config = "mine/config.json"}]\ngpus = ["h100"]\n'
    plan = plan_file(tmp_path, space + 'dtypes = ["bf16"]\n[prices]\nh100 = 3\n')
    err = refused(tmp_path, capsys, trace, "--candidates", plan)
    assert err.startswith(f"loadgen plan: --candidates {plan}: [space] models {config}: "), err
    assert problem in err
    flags = ["--models", str(config), "--gpu-types", "h100", "--dtypes", "bf16"]
    err = refused(tmp_path, capsys, trace, *flags, "--gpu-prices", "h100=3")
    assert err.startswith(f"loadgen plan: --models {config}: ") and problem in err


def test_a_model_table_without_model_config(tmp_path, capsys, trace) -> None:
    space = '[space]\nmodels = [{config = "config.json"}]\ngpus = ["h100"]\ndtypes = ["bf16"]\n'
    plan = plan_file(tmp_path, space + "[prices]\nh100 = 3\n")
    err = refused(tmp_path, capsys, trace, "--candidates", plan)
    assert 'a model is a preset or {model_config = "config.json"}' in err
