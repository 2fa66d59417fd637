"""Prompts, their calibration, lengths, datasets, request bodies, and target resolution."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loadgen.engine.dataset import load_dataset
from loadgen.engine.sizing import Count, calibrate
from loadgen.engine.targets import Target, load_file, resolve
from loadgen.engine.workload import Lengths, Workload
from loadgen.inputs.prompt_text import (
    WORDS,
    synthetic_text,
    user_messages,
)
from loadgen.sim.model.tokenizer import SUBWORDS
from loadgen.sim.wire.requests import parse_tokenize, tokenize_tokens
from tests.support import ROOT

EXAMPLE_TARGETS = ROOT / "examples" / "targets.toml"


def prompt_tokens(body: dict) -> int:
    """A /tokenize body counted as the scripted upstream counts it (loadgen.sim's subwords)."""
    return len(tokenize_tokens(parse_tokenize(json.dumps(body).encode()), SUBWORDS))


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


def test_prompt_words_have_their_own_generator() -> None:
    def first_prompt(prompt_seed: int) -> tuple[int, str]:
        rng = np.random.default_rng(0)
        words = np.random.default_rng(prompt_seed)
        work = Workload("completions", Lengths(5, 50), Lengths(9, 9), rng, prompt_rng=words)
        body = work.body("m")
        return len(body["prompt"].split()), body["prompt"]

    (n1, text1), (n2, text2) = first_prompt(1), first_prompt(2)
    assert n1 == n2 and text1 != text2  # same length (--seed), other words (--prompt-seed)


def counter(tokens: Callable[[str], int | None]) -> Count:
    async def count(text: str) -> int | None:
        return tokens(text)

    return count


@pytest.mark.parametrize(
    ("shape", "overhead"),
    [
        (lambda text: {"prompt": text}, 1 + 1),  # BOS, the lead
        (lambda text: {"messages": user_messages(text)}, 3 + 2 + 1),  # role, generation, lead
    ],
    ids=["completions", "chat"],
)
def test_calibration_makes_every_length_exact(shape: Callable, overhead: int) -> None:
    """The scripted upstream's tokenizer: long words cost two tokens, chat has a template."""

    def tokens(text: str) -> int:
        return prompt_tokens(shape(text))

    sizing = asyncio.run(calibrate(counter(tokens), 300, "tokenize"))
    assert sizing.source == "tokenize" and sizing.overhead == overhead
    assert sizing.words == tuple(w for w in WORDS if len(w) <= 4)
    rng = np.random.default_rng(2)
    for length in range(overhead, 1200, 7):
        assert tokens(synthetic_text(length, sizing, rng)) == length


def test_calibration_corrects_a_count_that_does_not_add_up() -> None:
    """A tokenizer that adds a token to prompts longer than 50 words, which the overhead's
    measure (32 words) cannot see: the check at the mean length corrects for it."""

    def tokens(text: str) -> int:
        words = len(text.split())
        return words + (words > 50)

    sizing = asyncio.run(calibrate(counter(tokens), 200, "tokenizer"))
    assert sizing.overhead == 2
    rng = np.random.default_rng(3)
    assert {tokens(synthetic_text(n, sizing, rng)) - n for n in range(60, 400)} == {0}


def test_calibration_without_a_count() -> None:
    assert asyncio.run(calibrate(counter(lambda text: None), 100, "tokenize")) is None
    # every word costs two tokens: none qualifies, so there is nothing to size with
    assert asyncio.run(calibrate(counter(lambda text: 2 * len(text.split())), 100, "x")) is None


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
