"""Prompts, lengths, datasets, request bodies, and target resolution."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.targets import Target, load_file, resolve
from loadgen.workload import Lengths, Workload, load_dataset, synthetic_text

EXAMPLE_TARGETS = Path(__file__).parent.parent / "examples" / "targets.toml"


def test_lengths() -> None:
    assert Lengths.parse("512") == Lengths(512, 512)
    assert Lengths.parse("256-1024") == Lengths(256, 1024)
    rng = np.random.default_rng(0)
    draws = [Lengths(10, 20).draw(rng) for _ in range(2000)]
    assert min(draws) == 10 and max(draws) == 20
    assert np.mean(draws) == pytest.approx(15, abs=0.3)
    for bad in ("0", "20-10", "abc", "-5"):
        with pytest.raises(ValueError):
            Lengths.parse(bad)


@pytest.mark.parametrize("ratio", [1.0, 1.3])
def test_synthetic_prompt_hits_the_length(ratio: float) -> None:
    rng = np.random.default_rng(1)
    text = synthetic_text(512, ratio, rng)
    words = text.split()
    # nonce ≈ 2 tokens, every other word `ratio` tokens
    assert 2 + (len(words) - 1) * ratio == pytest.approx(512, abs=2)
    assert synthetic_text(512, ratio, rng).split()[0] != words[0]  # no shared prefix


def test_chat_and_completions_bodies() -> None:
    rng = np.random.default_rng(2)
    chat = Workload("chat", Lengths(8, 8), Lengths(32, 32), rng).body("m")
    assert chat["model"] == "m" and chat["max_tokens"] == 32 and chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["ignore_eos"] is True and chat["temperature"] == 0
    assert chat["messages"][0]["role"] == "user"
    plain = Workload("completions", Lengths(8, 8), Lengths(4, 4), rng, ignore_eos=False)
    assert plain.path == "/v1/completions"
    body = plain.body("m")
    assert isinstance(body["prompt"], str) and "ignore_eos" not in body


def test_jsonl_and_sharegpt_datasets(tmp_path: Path) -> None:
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(
        json.dumps({"prompt": "hello", "max_tokens": 5})
        + "\n\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    prompts = load_dataset(jsonl)
    assert prompts[0].text == "hello" and prompts[0].max_tokens == 5
    assert prompts[1].messages[0]["content"] == "hi"
    sharegpt = tmp_path / "s.json"
    sharegpt.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "q1"},
                        {"from": "gpt", "value": "a"},
                    ]
                },
                {"conversations": []},
            ]
        )
    )
    assert [p.messages[0]["content"] for p in load_dataset(sharegpt)] == ["q1"]
    rng = np.random.default_rng(3)
    work = Workload("completions", Lengths(1, 1), Lengths(9, 9), rng, dataset=prompts)
    bodies = [work.body("m") for _ in range(20)]
    assert {b["prompt"] for b in bodies} == {"hello", "hi"}
    assert {b["max_tokens"] for b in bodies if b["prompt"] == "hello"} == {5}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_dataset(bad)


def test_resolve_urls_and_builtins() -> None:
    assert resolve("http://10.0.0.1:8000/v1/") == Target("10.0.0.1:8000", "http://10.0.0.1:8000")
    assert resolve("proxy", env={}).url == "http://127.0.0.1:8080"
    assert resolve("direct", env={"VLLM_URL": "http://v:1"}).url == "http://v:1"
    assert resolve("proxy", overrides={"proxy": "http://x:2"}).url == "http://x:2"
    with pytest.raises(ValueError, match="unknown target"):
        resolve("nope", env={})


def test_targets_file_example(tmp_path: Path) -> None:
    tables = load_file(EXAMPLE_TARGETS)
    assert tables, "the shipped example defines targets"
    env = {table["api_key_env"]: "sk-test" for table in tables.values() if "api_key_env" in table}
    for name in tables:
        target = resolve(name, tables, env=env)
        assert target.name == name and target.url.startswith("http")
    custom = tmp_path / "t.toml"
    custom.write_text(
        '[targets.a]\nurl = "http://h:1/v1"\nmodel = "m"\napi_key_env = "KEY"\n'
        'headers = { "X-Team" = "perf" }\n'
    )
    target = resolve("a", load_file(custom), env={"KEY": "secret"})
    assert target == Target(
        "a", "http://h:1", "m", {"X-Team": "perf", "Authorization": "Bearer secret"}
    )
    with pytest.raises(ValueError, match="KEY is not set"):
        resolve("a", load_file(custom), env={})
