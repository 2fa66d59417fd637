"""A preset file is read as the proxy's settings are: each key typed and ranged, so a value
no model can run with (a zero that divides, a NaN, a boolean read as a number, a block size
vLLM has not) is one line naming the file and the key, exit 2, from each command that takes
a file: the simulator, its fit and a virtual: target."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from loadgen.commands.cli import main as loadgen_main
from loadgen.sim import cli
from loadgen.sim.model import presets
from loadgen.sim.model.roofline import Efficiency, Hardware, ModelSpec
from loadgen.sim.model.scheduler import EngineConfig
from tests.support import ROOT

BASE = "llama-70b-bf16-tp4-a100"
TEXT = (presets._directory() / f"{BASE}.toml").read_text()

BAD = [
    ("tensor_parallel = 4", "tensor_parallel = 0", "[hardware] tensor_parallel: 0 is zero"),
    ("block_size = 16", "block_size = 0", "[engine] block_size: 0 is less than 1"),
    ("kv_heads = 8", "kv_heads = 0", "[model] kv_heads: 0 is zero"),
    ("peak_flops = 312e12", "peak_flops = 0", "[hardware] peak_flops: 0 is zero"),
    ("hbm_bandwidth = 2.039e12", "hbm_bandwidth = true", "[hardware] hbm_bandwidth: expected"),
    ("heads = 64", "heads = 0", "[model] heads: 0 is zero"),
    ("peak_flops = 312e12", "peak_flops = inf", "[hardware] peak_flops: inf is not finite"),
    ("idle_watts = 60", "idle_watts = nan", "[hardware] idle_watts: nan is not finite"),
    ("block_size = 16", "block_size = 7", "[engine] block_size: 7 is not one of 1, 8, 16"),
    ("layers = 80", "", "[model] layers: missing"),
    ("heads = 64", "heads = 60", "[model] kv_heads: 8 does not divide heads (60)"),
    ("gpu_memory_utilization = 0.9", "gpu_memory_utilization = 2", "utilization: 2 is more"),
]
IDS = [new or f"no {old.split()[0]}" for old, new, _ in BAD]


def bad_file(tmp_path: Path, old: str, new: str) -> Path:
    assert old in TEXT
    path = tmp_path / "bad.toml"
    path.write_text(TEXT.replace(old, new, 1))
    return path


def one_line(capsys: pytest.CaptureFixture[str], path: Path, says: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0] and says in err[0], err[0]


@pytest.mark.parametrize(("old", "new", "says"), BAD, ids=IDS)
def test_the_simulator_refuses_a_bad_preset_file(tmp_path, capsys, old, new, says) -> None:
    path = bad_file(tmp_path, old, new)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--preset-file", str(path)])
    assert exited.value.code == 2
    one_line(capsys, path, says)


@pytest.mark.parametrize(("old", "new", "says"), BAD, ids=IDS)
def test_the_fit_refuses_a_bad_preset_file(tmp_path, capsys, old, new, says) -> None:
    path = bad_file(tmp_path, old, new)
    out = tmp_path / "fitted.toml"
    with pytest.raises(SystemExit) as exited:
        cli.main(
            ["fit", str(tmp_path / "log.jsonl"), "--preset-file", str(path), "--out", str(out)]
        )
    assert exited.value.code == 2
    one_line(capsys, path, says)
    assert not out.exists()


@pytest.mark.parametrize(("old", "new", "says"), BAD, ids=IDS)
def test_a_virtual_target_refuses_a_bad_preset_file(tmp_path, capsys, old, new, says) -> None:
    path = bad_file(tmp_path, old, new)
    out = tmp_path / "run"
    code = loadgen_main(["--target", f"virtual:{path}", "--rate", "1", "--out", str(out)])
    assert code == 2
    one_line(capsys, path, says)
    assert not out.exists()


def test_a_number_written_as_text_reads_as_the_number(tmp_path) -> None:
    """As a setting from the environment: "4" is 4, not a TypeError deep in the model."""
    path = bad_file(tmp_path, "tensor_parallel = 4", 'tensor_parallel = "4"')
    assert presets.load_file(path) == dataclasses.replace(presets.load(BASE), name="bad")


def test_vllms_largest_block_size_is_taken(tmp_path) -> None:
    path = bad_file(tmp_path, "block_size = 16", "block_size = 256")
    assert presets.load_file(path).engine.block_size == 256


def test_a_file_that_is_not_toml_names_itself(tmp_path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[model\n")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        presets.load_file(path)


@pytest.mark.parametrize(
    ("table", "cls"),
    [
        ("model", ModelSpec),
        ("hardware", Hardware),
        ("efficiency", Efficiency),
        ("engine", EngineConfig),
    ],
)
def test_every_field_has_a_type_and_range(table: str, cls: type) -> None:
    """A field added to the model without a declared type would be unreadable from a file."""
    names = {f.name for f in dataclasses.fields(cls)} - {"speculation"}  # a flag, not a key
    assert set(presets.TYPES[table]) == names


def test_every_bundled_preset_reads_back_from_its_dump(tmp_path) -> None:
    for name in presets.names():
        preset = presets.load(name)
        path = tmp_path / f"{name}.toml"
        path.write_text(presets.dump(preset))
        assert presets.load_file(path) == preset, name


def test_the_docs_key_table_holds_every_key() -> None:
    docs = str(Path(__file__).parents[3] / "docs")
    sys.path.insert(0, docs)
    try:
        import hooks
    finally:
        sys.path.remove(docs)
    rows = hooks.key_table(presets.TYPES).splitlines()[2:]
    assert len(rows) == sum(len(keys) for keys in presets.TYPES.values())
    assert "| `[engine]` | `block_size` | one of 1, 8, 16, 32, 64, 128, 256 | yes |" in rows


def test_a_cpu_serving_a_test_model_is_a_preset_too() -> None:
    """The real-vLLM tier's preset: a 0.46 M-parameter model on two x86 cores, far below any
    GPU's figures and still inside every key's range."""
    preset = presets.load_file(str(ROOT / "tests" / "real_vllm" / "tiny-cpu.toml"))
    assert preset.perf.model.params == 0.46e6
    assert preset.perf.hardware.peak_flops == 100e9
