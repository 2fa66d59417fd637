"""A model's shape from its config.json, against the bundled presets' and published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.sim.model import hf_config, presets

CONFIGS = Path(__file__).parent / "configs"


@pytest.mark.parametrize(
    ("config", "preset"),
    [
        ("llama-3-70b", "llama-70b-bf16-tp4-a100"),
        ("qwen2.5-72b", "qwen-72b-bf16-tp4-a100"),
        ("llama-3-8b", "llama-3-8b-awq-a100"),
    ],
)
def test_the_shape_matches_the_bundled_preset(config: str, preset: str) -> None:
    shape = hf_config.read(CONFIGS / f"{config}.json")
    model = presets.load(preset).perf.model
    assert shape.params == pytest.approx(model.params, rel=0.002)
    made = shape.spec("bf16")
    for field in ("layers", "hidden_size", "heads", "kv_heads", "head_dim"):
        assert getattr(made, field) == getattr(model, field), field
    assert shape.spec("awq").bytes_per_param == 0.56 and shape.spec("awq").quantization == "awq"


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [("mixtral-8x7b", 46.7e9, 12.9e9), ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9)],
)
def test_a_mixture_of_experts_counts_every_expert_and_a_token_s_own(
    config: str, total: float, active: float
) -> None:
    shape = hf_config.read(CONFIGS / f"{config}.json")
    assert shape.params == pytest.approx(total, rel=0.01)
    assert shape.active_params == pytest.approx(active, rel=0.01)
    spec = shape.spec("bf16")
    assert spec.weight_bytes_read(1) < spec.weight_bytes_read(64) <= spec.weight_bytes


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "cannot read it as JSON"),
        ('{"architectures": ["X"]}', "not a model's config.json: no hidden_size"),
        ('[1, 2]', "not a JSON object"),
        ('{"hidden_size": 0, "num_hidden_layers": 2}', "hidden_size = 0: not a positive whole"),
        ('{"kv_lora_rank": 512}', "multi-head latent attention"),
    ],
)
def test_a_file_that_is_not_a_model_s_config_is_one_line_naming_it(
    tmp_path: Path, content: str, says: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ValueError) as error:
        hf_config.read(path)
    message = str(error.value)
    assert message.startswith(f"--model-config {path}: ") and says in message
    assert "\n" not in message


def test_the_checkpoint_s_format_is_read_from_its_config(tmp_path: Path) -> None:
    data = json.loads((CONFIGS / "llama-3-8b.json").read_text())
    data["quantization_config"] = {"quant_method": "awq", "bits": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert hf_config.read(path).dtype == "awq"
    assert hf_config.read(CONFIGS / "llama-3-8b.json").dtype == "bf16"
