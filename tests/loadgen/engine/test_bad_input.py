"""Bad input to loadgen stops it before any load: every numeric flag refuses nan, inf,
negative and out-of-range values naming the flag; a dataset or trace of the wrong shape
names FILE:LINE; exit 2 and nothing written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadgen.commands.cli import build_parser
from loadgen.engine import flags
from loadgen.engine.dataset import load_dataset
from loadgen.replay import ReplaySettings, load
from loadgen.replay import flags as replay_flags
from tests.support import run_module

BAD = ("nan", "inf", "-inf", "-1", "1e400", "abc")


def typed_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[0] for a in parser._actions if a.option_strings and a.type]


FLAGS = [(search, flag) for search in (False, True) for flag in typed_flags(build_parser(search))]


@pytest.mark.parametrize(("search", "flag"), FLAGS)
@pytest.mark.parametrize("bad", BAD)
def test_every_number_flag_refuses_what_no_run_can_use(search: bool, flag: str, bad: str, capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser(search).parse_args([flag, bad])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"argument {flag}: " in line and "invalid" not in line  # the reason, not a type name


def test_the_typed_flags_are_the_ones_that_take_numbers() -> None:
    numbers = {"--rate", "--concurrency", "--duration", "--temperature", "--seed", "--workers",
               "--replay-speed", "--input-tokens", "--think-time"}  # fmt: skip
    assert numbers <= {f for _, f in FLAGS}


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--rate", "0"], "0 is zero"),
        (["--rate", "1,nan"], "nan is not finite"),
        (["--rate", "200000"], "more than 100000"),
        (["--concurrency", "2.5"], "is not a number of streams"),
        (["--input-tokens", "5-2"], "end is below its start"),
        (["--output-tokens", "99999999"], "more than 1000000"),
        (["--duration", "0s"], "0 is zero"),
        (["--warmup", "8d"], "not a duration"),
    ],
)
def test_values_in_range_only(args: list[str], problem: str, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(args)
    assert problem in capsys.readouterr().err


def test_the_locust_engines_text_values_are_checked_alike() -> None:
    """Its custom arguments stay text; `read` parses them with the flag's own parser."""
    with pytest.raises(ValueError, match="--temperature: nan is not finite"):
        flags.read(SimpleNamespace(temperature="nan"), "--temperature")
    args = SimpleNamespace(
        replay="t.csv", replay_format=None, replay_speed="inf", replay_block_tokens="16",
        replay_start="0s", skip_bad_rows=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="--replay-speed: inf is not finite"):
        replay_flags.settings(args)


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ('[{"conversations": 5}]', "d.json:1: conversations must be a list of turns, not a number"),
        ('[\n {"conversations": []},\n "x"\n]', "d.json:3: a conversation must be a JSON object"),
        ('[{"conversations": [{"from": "human", "value": 7}]}]', "d.json:1: a turn's value"),
        ('[{"conversations": [5]}]', "d.json:1: a turn must be a JSON object, not a number"),
        ("[\n{},\n{} {}]", "d.json:3: expected ',' or ']'"),
        ('{"prompt": "a"}\n{"prompt": 5}\n', "d.json:2: prompt must be text, not a number"),
        ('{"messages": "hi"}\n', "d.json:1: messages must be a non-empty list, not text"),
        ('{"messages": [{"content": "x"}]}\n', "d.json:1: each message must be an object with"),
        ('{"prompt": "a", "max_tokens": 1e9}\n', "d.json:1: max_tokens must be a whole number"),
        ('{"prompt": "a", "max_tokens": true}\n', "d.json:1: max_tokens must be a whole number"),
        ("[1, 2]\n", "d.json:1: a conversation must be a JSON object, not a number"),
        ('{"prompt": "a"}\n{"prompt": \n', "d.json:2: not JSON"),
    ],
)
def test_a_dataset_of_the_wrong_shape_is_named_by_file_and_line(
    content: str, where: str, tmp_path: Path
) -> None:
    path = tmp_path / "d.json"
    path.write_text(content)
    with pytest.raises(ValueError) as caught:
        load_dataset(path)
    assert str(caught.value).startswith(str(tmp_path)) and where in str(caught.value)


@pytest.mark.parametrize(
    ("timestamp", "problem"),
    [("9e15", "past any trace's time"), ("9e12", "past a week of replay")],
)
def test_a_trace_timestamp_past_any_trace_is_refused(timestamp: str, problem: str, tmp_path):
    trace = tmp_path / "t.jsonl"
    row = '{{"timestamp": {}, "input_length": 1, "output_length": 1}}'
    rows = [row.format(t) for t in ("0", timestamp)]
    trace.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=rf"t\.jsonl:2: .*{problem}"):
        load(ReplaySettings(file=str(trace)), None, None)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rate", "nan"], "argument --rate: nan is not finite"),
        (["--dataset", "DATASET"], "d.json:1: conversations must be a list of turns"),
        (["--replay", "TRACE"], "t.jsonl:2: timestamp 9e+15 is past any trace's time"),
    ],
)
def test_loadgen_exits_2_before_any_load_and_writes_nothing(
    args: list[str], said: str, tmp_path: Path
) -> None:
    (tmp_path / "d.json").write_text(json.dumps([{"conversations": 5}]))
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
        '{"timestamp": 9e15, "input_length": 1, "output_length": 1}\n'
    )
    paths = {"DATASET": str(tmp_path / "d.json"), "TRACE": str(tmp_path / "t.jsonl")}
    out = tmp_path / "run"
    run = run_module(
        "loadgen",
        *[paths.get(a, a) for a in args],
        "--target", "http://127.0.0.1:9", "--out", str(out),
        timeout=30,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert said in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()
