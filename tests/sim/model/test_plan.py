"""The tokenizer rule and the output plan (lengths, EOS, stop strings): pure functions."""

from __future__ import annotations

import statistics

import pytest

from loadgen.sim.model import tokenizer
from loadgen.sim.model.plan import natural_length, plan_output
from loadgen.sim.model.sequence import Seq


def test_text_tokens_are_whitespace_separated_runs() -> None:
    assert tokenizer.SIMPLE.text("Hello, world!  a\tb\nc") == ["Hello,", "world!", "a", "b", "c"]
    assert tokenizer.SIMPLE.text("   ") == []


def test_chat_adds_a_role_header_per_message_and_a_generation_prompt() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one two"},
                {"type": "image_url", "image_url": {"url": "x"}},
            ],
        },
        {"role": "assistant", "content": None},
    ]
    assert len(tokenizer.SIMPLE.chat(messages)) == (1 + 2) + (1 + 2) + 1 + 1
    assert len(tokenizer.SIMPLE.chat(messages, generation_prompt=False)) == 7
    with pytest.raises(TypeError):
        tokenizer.SIMPLE.chat([{"role": "user", "content": 5}])


def test_subwords_cost_long_words_two_tokens_and_add_a_template() -> None:
    rules = tokenizer.SUBWORDS
    assert rules.text("a word longer") == ["a", "word", "long", "er"]
    assert rules.prompt("a word longer") == ["<s>", "a", "word", "long", "er"]
    messages = [{"role": "user", "content": "tell me stories"}]
    assert len(rules.chat(messages)) == 3 + (1 + 1 + 2) + 2
    assert len(rules.chat(messages, generation_prompt=False)) == 3 + 4


def test_token_ids_are_stable_and_in_vocabulary() -> None:
    assert tokenizer.token_id("hello") == tokenizer.token_id("hello")
    assert tokenizer.token_id("hello") != tokenizer.token_id("world")
    assert all(0 <= tokenizer.token_id(w) < tokenizer.VOCAB_SIZE for w in tokenizer.WORDS)


def test_the_vocabulary_reads_ids_back_to_the_tokens_it_gave_them_for() -> None:
    vocabulary = tokenizer.Vocabulary(capacity=3)
    ids = vocabulary.ids(["a", "b", "a"])
    assert ids == [tokenizer.token_id(t) for t in ["a", "b", "a"]]
    assert vocabulary.text(ids) == "a b a"
    assert vocabulary.text([12345]) == ""  # never handed out
    vocabulary.ids(["c", "d"])  # capacity 3: "b" was used least recently
    assert vocabulary.text(ids) == "a a"
    words = tokenizer.Vocabulary().ids(tokenizer.WORDS)
    assert len(set(words)) == len(tokenizer.WORDS)  # wide ids: distinct words, distinct ids


def test_a_completion_retokenizes_to_its_token_count() -> None:
    plan = plan_output(1234, 300, ignore_eos=True)
    assert len(tokenizer.SIMPLE.text("".join(plan.pieces))) == plan.tokens == 300


def test_the_same_prompt_gets_the_same_completion() -> None:
    key = tokenizer.fingerprint(tokenizer.SIMPLE.text("tell me a story"))
    assert plan_output(key, 100) == plan_output(key, 100)
    longer = plan_output(key, 80, ignore_eos=True).pieces
    assert plan_output(key, 50, ignore_eos=True).pieces == longer[:50]  # a prefix of it
    other = tokenizer.fingerprint(tokenizer.SIMPLE.text("tell me a joke"))
    assert plan_output(other, 200, ignore_eos=True) != plan_output(key, 200, ignore_eos=True)


def test_natural_lengths_are_geometric_with_the_configured_mean() -> None:
    lengths = [natural_length(key, 0, 100) for key in range(4000)]
    assert min(lengths) >= 1
    assert statistics.mean(lengths) == pytest.approx(100, rel=0.08)
    assert statistics.median(lengths) == pytest.approx(100 * 0.693, rel=0.1)  # ln 2 × mean
    assert [natural_length(k, 1, 100) for k in range(50)] != lengths[:50]  # the seed matters
    assert natural_length(7, 0, 1) == 1


def test_max_tokens_caps_with_length_and_eos_stops_with_stop() -> None:
    key = next(k for k in range(1000) if natural_length(k, 0, 50) < 40)
    natural = natural_length(key, 0, 50)
    stopped = plan_output(key, 100, mean_output_tokens=50)
    assert (stopped.tokens, stopped.finish_reason) == (natural, "stop")
    capped = plan_output(key, natural - 1, mean_output_tokens=50)
    assert (capped.tokens, capped.finish_reason) == (natural - 1, "length")
    forced = plan_output(key, 100, ignore_eos=True, mean_output_tokens=50)
    assert (forced.tokens, forced.finish_reason) == (100, "length")


def test_a_stop_string_ends_the_text_before_it() -> None:
    full = plan_output(99, 60, ignore_eos=True)
    text = "".join(full.pieces)
    word = full.pieces[20].strip()
    start = text.index(word)
    plan = plan_output(99, 60, ignore_eos=True, stop=("zzz-never", word))
    assert "".join(plan.pieces) == text[:start]
    assert plan.finish_reason == "stop" and plan.stop_reason == word
    assert plan.tokens <= 21
    assert plan_output(99, 60, ignore_eos=True, stop=("zzz-never",)) == full


def test_chunks_follow_the_stream_interval() -> None:
    assert list(Seq(1, 10, 0.0, stream_interval=1).chunk_ends()) == list(range(1, 11))
    assert list(Seq(1, 10, 0.0, stream_interval=4).chunk_ends()) == [1, 5, 9, 10]
    assert list(Seq(1, 9, 0.0, stream_interval=4).chunk_ends()) == [1, 5, 9]
    assert list(Seq(1, 1, 0.0, stream_interval=4).chunk_ends()) == [1]
