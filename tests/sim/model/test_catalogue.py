"""The GPU catalogue: names, dtypes, ceilings, and the hardware it builds."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from loadgen.sim.model import catalogue
from loadgen.sim.model.roofline import MBU_CEILING, Efficiency, ModelSpec, PerfModel

EIGHT_B = ModelSpec(
    params=8.03e9,
    bytes_per_param=2,
    layers=32,
    hidden_size=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    kv_cache_bytes=2,
    max_model_len=8192,
)
ASKED = [
    *("a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb"),
    *("h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200", "l40s", "l4", "a10g", "rtx-4090"),
    *("mi300x", "gaudi-3", "ascend-910b"),
]


def test_the_catalogue_holds_every_gpu_asked_for_under_a_kebab_case_id() -> None:
    assert catalogue.names() == ASKED
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) for name in catalogue.names())


@pytest.mark.parametrize("name", ["a100", "A100-SXM-80GB", "4090", "H100", "mi300", "910b"])
def test_a_gpu_is_found_by_id_or_alias_in_any_case(name: str) -> None:
    found = catalogue.gpu(name)
    assert name.lower() in (found.id, *found.aliases)


def test_an_unknown_gpu_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"--gpu v100: not in the catalogue; known: a100-sxm-40gb"):
        catalogue.gpu("v100")


def test_a_dtype_the_gpu_has_no_rate_for_is_refused_naming_the_ones_it_runs() -> None:
    with pytest.raises(ValueError, match=r"a100-sxm-80gb has no fp8 rate.*runs bf16, fp16, int8"):
        catalogue.gpu("a100-sxm-80gb").hardware(1, "fp8")
    with pytest.raises(ValueError, match=r"--dtype int3: not a dtype; known: bf16"):
        catalogue.gpu("h100-sxm").peak_flops("int3")


def test_each_dtype_runs_at_the_datasheet_rate_of_its_matmuls() -> None:
    h100 = catalogue.gpu("h100-sxm")
    fp8, bf16 = h100.hardware(2, "fp8").peak_flops, h100.hardware(2, "bf16").peak_flops
    assert fp8 == pytest.approx(2 * bf16, rel=1e-3)
    assert h100.hardware(1, "awq").peak_flops == h100.flops["fp16"]  # W4A16: 16-bit matmuls
    assert h100.hardware(4, "bf16").tensor_parallel == 4


def test_every_ceiling_is_a_share_of_the_datasheet_and_the_h200_keeps_its_measured_one() -> None:
    for gpu in catalogue.gpus():
        assert 0.5 < gpu.mbu_ceiling <= 1 and 0.5 < gpu.mfu_ceiling <= 1
    assert catalogue.gpu("h200").mbu_ceiling == MBU_CEILING
    assert catalogue.gpu("mi300x").mbu_ceiling == MBU_CEILING  # no measurement published


def test_a_gddr_card_may_claim_more_of_its_datasheet_than_the_h200_measured() -> None:
    """An 8B model in bf16 on an RTX 4090 needs about 0.82 of its datasheet bandwidth, as
    measured by users; the H200's 0.77 refused it."""
    efficiency = Efficiency(mbu=0.82, mfu=0.5)
    perf = PerfModel(EIGHT_B, catalogue.gpu("rtx-4090").hardware(1, "bf16"), efficiency)
    assert perf.efficiency.mbu == 0.82
    h200 = catalogue.gpu("h200").hardware(1, "bf16")
    with pytest.raises(ValueError, match="the GPU's MBU ceiling"):
        PerfModel(EIGHT_B, h200, efficiency)
    with pytest.raises(ValueError, match="the GPU's MBU ceiling"):
        PerfModel(EIGHT_B, dataclasses.replace(h200, mbu_ceiling=0.84), Efficiency(0.85, 0.5))


def test_the_power_terms_reach_the_limit_at_either_ceiling() -> None:
    hw = catalogue.gpu("l40s").hardware(1, "bf16")
    at_limit = hw.idle_watts + hw.memory_watts * hw.mbu_ceiling
    assert at_limit == pytest.approx(hw.max_watts, rel=0.01)
    assert hw.idle_watts + hw.compute_watts * hw.mfu_ceiling == pytest.approx(hw.max_watts, 0.01)


def test_each_ceiling_says_where_it_comes_from() -> None:
    assert "gpu-benches" in catalogue.gpu("a100-sxm-80gb").ceiling_source
    assert "the H200's ceiling" in catalogue.gpu("b200").ceiling_source


def test_the_docs_gpu_table_holds_every_gpu_and_its_ceilings() -> None:
    """The catalogue page's table is generated from the data: it cannot drift from it."""
    docs = str(Path(__file__).parents[3] / "docs")
    sys.path.insert(0, docs)
    try:
        import hooks
    finally:
        sys.path.remove(docs)
    rows = hooks.gpu_table(catalogue.gpus()).splitlines()[2:]
    assert len(rows) == len(catalogue.gpus())
    for row, gpu in zip(rows, catalogue.gpus(), strict=True):
        cells = [cell.strip() for cell in row.split("|")]
        assert cells[1].startswith(f"`{gpu.id}`")
        assert float(cells[7]) == gpu.mbu_ceiling and float(cells[8]) == gpu.mfu_ceiling
        assert gpu.ceiling_source in cells[9]
