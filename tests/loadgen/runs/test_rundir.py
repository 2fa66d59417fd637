"""A run directory on disk: what a run wrote reads back as the same data, which is what lets
`report DIR` rebuild any run and `merge` add shards exactly; a folder that holds no run
says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.analysis.records import GpuSample
from loadgen.runs import rundir
from tests.loadgen.analysis.test_signals_summary import phases, run_dir, with_signals
from tests.loadgen.analysis.test_summary import records


def test_a_run_reads_back_as_it_was_written(tmp_path: Path) -> None:
    recs = with_signals(records("a", 40, 0.3, 2), cached=128, stall_every=5)
    out = run_dir(tmp_path / "run", recs, "a")
    read = rundir.read(out)
    assert read.records == recs
    assert read.phases == phases("a")
    assert read.loop_lag and read.gpu == [] and read.server == []
    assert rundir.read_summary(out)["targets"]["a"]["requests"]["ok"] == 40


def test_the_gpu_samples_come_back_too(tmp_path: Path) -> None:
    data = rundir.read(run_dir(tmp_path / "run", records("a", 10, 0.3, 1), "a"))
    data.gpu = [GpuSample(at=1.0, source="dcgm", gpu="0", memory_mib=1024.0, power_w=300.0)]
    rundir.write(tmp_path / "again", data, {"targets": {}})
    assert rundir.read(tmp_path / "again").gpu == data.gpu


def test_a_folder_without_a_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a run directory"):
        rundir.read(tmp_path)
