"""Eval files: every item shape and match rule, every error naming FILE:LINE, the canaries."""

from __future__ import annotations

import json

import pytest

from loadgen.analysis import evals


def write(tmp_path, *lines: object) -> str:
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    return str(path)


def test_items_read_with_their_defaults(tmp_path) -> None:
    path = write(
        tmp_path,
        {"prompt": "2+2=", "answer": 4, "match": "number", "max_tokens": 8},
        "",
        {"messages": [{"role": "user", "content": "pick"}], "answer": "B", "id": "q7"},
    )
    first, second = evals.load(path)
    assert (first.id, first.answer, first.match) == (f"{path}:1", "4", "number")
    assert first.max_tokens == 8
    assert (second.id, second.match, second.prompt) == ("q7", "exact", None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ({"answer": "x"}, "exactly one of messages and prompt"),
        ({"prompt": "p", "messages": [{"role": "user", "content": "c"}], "answer": "x"}, "exactly"),
        ({"messages": [], "answer": "x"}, "messages must be"),
        ({"prompt": "p"}, "needs an answer"),
        ({"prompt": "p", "answer": ""}, "needs an answer"),
        ({"prompt": "p", "answer": "x", "match": "fuzzy"}, "unknown match"),
        ({"prompt": "p", "answer": "(unclosed", "match": "regex"}, "does not compile"),
        ({"prompt": "p", "answer": "many", "match": "number"}, "needs a number"),
        ({"prompt": "p", "answer": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "p", "answer": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "p", "answer": "x", "max_tokens": 1_000_001}, "from 1 to 1000000"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line_without_its_text(tmp_path, line, message) -> None:
    path = write(tmp_path, {"prompt": "fine", "answer": "secret"}, line)
    with pytest.raises(ValueError, match=message) as caught:
        evals.load(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert "secret" not in str(caught.value) and "unclosed" not in str(caught.value)


def test_files_without_items_or_with_twice_the_same_id_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="no items"):
        evals.load(write(tmp_path, "", "  "))
    twice = {"prompt": "p", "answer": "a", "id": "same"}
    with pytest.raises(ValueError, match="used twice"):
        evals.load(write(tmp_path, twice, twice))
    with pytest.raises(ValueError, match="cannot read"):
        evals.load(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="unknown built-in"):
        evals.load("builtin:poetry")


@pytest.mark.parametrize(
    ("match", "answer", "output", "correct"),
    [
        ("exact", "Paris", "  Paris\n", True),
        ("exact", "New York", "New  York", True),
        ("exact", "Paris", "paris", False),
        ("contains", "paris", "It is PARIS.", True),
        ("contains", "Lyon", "It is Paris.", False),
        ("regex", r"\b4[0-9]\b", "about 42 or so", True),
        ("regex", r"^42$", "about 42", False),
        ("number", "1234", "so 12 + 1222 = 1,234", True),
        ("number", "42", "#### 42.0", True),
        ("number", "42", "42 and then 43", False),
        ("number", "42", "no digits", False),
        ("choice", "B", "The answer is (B).", True),
        ("choice", "b", "B) because", True),
        ("choice", "C", "(A)", False),
        ("choice", "D", "I think\nD\n", True),
    ],
)
def test_match_rules(match, answer, output, correct) -> None:
    assert evals.score(match, answer, output) is correct


def test_canaries_are_seeded_and_answer_themselves() -> None:
    arithmetic = evals.load("builtin:arithmetic", seed=5)
    assert arithmetic == evals.load("builtin:arithmetic", seed=5)
    assert arithmetic != evals.load("builtin:arithmetic", seed=6)
    assert len(arithmetic) == evals.BUILTIN_ITEMS
    for item in arithmetic[:20]:
        a, op, b = item.messages[0]["content"].removeprefix("Compute ").split(".")[0].split()
        result = int(a) + int(b) if op == "+" else int(a) * int(b)
        assert item.correct(str(result)) and not item.correct(str(result + 1))
    copy = evals.load("builtin:copy", seed=5)
    text = copy[0].answer
    assert len(text) == 24 and text in copy[0].messages[0]["content"]
    assert copy[0].correct(f"Here it is: {text}") and not copy[0].correct(text[:-1])
