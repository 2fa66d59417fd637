"""Every setting x every source x every kind of bad value is refused at start, in one line
that names the source (`--flag`, `LATENCY_PROXY_FLAG`, `FILE.toml: key`).

The bad values are derived from each setting's declared type, so a setting added to the
table is covered here without a line of its own; a type this file does not know fails.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from latency_proxy.base.config import (
    SETTING_TYPES,
    ConfigError,
    api_key_source,
    load_settings,
    parse_route,
)
from latency_proxy.base.setting_types import (
    Duration,
    ExistingFile,
    Flag,
    ListOf,
    Number,
    Size,
    Text,
    regular_expression,
)
from latency_proxy.base.worker_count import WorkerCount
from tests.support import ROOT

NAN, INF = math.nan, math.inf
BASE = {"upstream": ["http://127.0.0.1:1"]}
REPEATED_FLAGS = ("upstream", "upstream_api_key", "redact_pattern")  # argparse gives lists


class Bad(NamedTuple):
    """A bad value as TOML writes it, and as a flag or variable's text (None: TOML only,
    there is no such text: every text is a string)."""

    what: str
    toml: Any
    text: str | None
    problem: str  # a word the message must hold


def _numbers(positive: bool, high: float, show: Callable[[float], str] = str) -> list[Bad]:
    cases = [
        Bad("nan", NAN, "nan", "not finite"),
        Bad("inf", INF, "inf", "not finite"),
        Bad("-inf", -INF, "-inf", "not finite"),
        Bad("negative", -1, "-1", "negative"),
        Bad("out of range", high * 2, show(high * 2), "more than"),
    ]
    return cases + ([Bad("zero", 0, "0", "zero")] if positive else [])


def _duration(t: Duration) -> list[Bad]:
    wrong = [
        Bad("list", [1], None, "expected"),
        Bad("bool", True, "true", ""),
        Bad("word", "soon", "soon", "not a duration"),
        Bad("table", {"a": 1}, None, "expected"),
    ]
    return wrong + _numbers(t.positive, t.high)


def _number(t: Number) -> list[Bad]:
    wrong = [
        Bad("bool", True, "true", "true"),
        Bad("list", [1, 2], None, "expected"),
        Bad("table", {"a": 1}, None, "expected"),
    ]
    if t.whole:  # a fraction is not rounded; 0 is below a count's least
        fraction = [Bad("fraction", 1.5, "1.5", "1.5")]
        zero = [Bad("zero", 0, "0", "less than")] if t.low > 0 else []
        return wrong + fraction + zero + _whole(_numbers(False, t.high))
    return wrong + _numbers(not t.zero_ok, t.high)


def _whole(cases: list[Bad]) -> list[Bad]:
    """A whole-number type reads 'nan' and 'inf' as no number at all: the message names them."""
    return [b._replace(problem=b.text) if "inf" in b.what or b.what == "nan" else b for b in cases]


def _size(_: Size) -> list[Bad]:
    wrong = [
        Bad("bool", True, "true", ""),
        Bad("fraction", 1.5, "1.5MiB", ""),
        Bad("word", "lots", "lots", "not a size"),
        Bad("list", [1], None, "expected"),
    ]
    return wrong + _whole(_numbers(True, 2**32))


def _flag(_: Flag) -> list[Bad]:
    return [
        Bad("maybe", "maybe", "maybe", "true or false"),
        Bad("int", 1, None, "true or false"),
        Bad("nan", NAN, "nan", "true or false"),
        Bad("list", [True], None, "true or false"),
    ]


def _text(t: Text) -> list[Bad]:
    wrong = [
        Bad("int", 5, None, "expected"),
        Bad("nan", NAN, None, "expected"),
        Bad("bool", True, None, "expected"),
        Bad("list", ["a"], None, "expected"),
        Bad("table", {"a": 1}, None, "expected"),
    ]
    return wrong + ([Bad("choice", "everything", "everything", "one of")] if t.choices else [])


def _file(t: ExistingFile) -> list[Bad]:
    cases = [
        *_text(Text()),
        Bad("missing", "/nonexistent/file", "/nonexistent/file", "does not exist"),
        Bad("directory", "/", "/", "directory"),
    ]
    return cases + ([Bad("no cert", __file__, __file__, "no PEM")] if t.check else [])


ITEM_CHECKS: dict[Callable[[Any], Any], list[Bad]] = {
    parse_route: [
        Bad(f"url {url}", url, url, problem)
        for url, problem in [
            ("http://[::1", "not a URL"),
            ("http://127.0.0.1:99999", "not a URL"),
            ("http://127.0.0.1:abc", "not a URL"),
            ("http://127.0.0.1:0", "port 0"),
            ("ftp://x", "http(s)"),
            ("http://x/v1", "/v1"),
        ]
    ],
    regular_expression: [Bad("regex", "(", "(", "regular expression")],
    api_key_source: [Bad("key", "m=bogus:x", "m=bogus:x", "env:VAR")],
}


def _list(t: ListOf) -> list[Bad]:
    items = BAD_VALUES[type(t.item)](t.item) + (ITEM_CHECKS[t.parse] if t.parse else [])
    whole = [Bad("table", {"a": 1}, None, "expected a list"), Bad("empty", [], None, "none")]
    in_list = [b._replace(what="item " + b.what, toml=[b.toml]) for b in items]
    return whole + in_list + [b for b in items if b.toml == b.text]


def _workers(t: WorkerCount) -> list[Bad]:
    return [
        Bad("nan", NAN, "nan", "worker count or auto"),
        Bad("inf", INF, "inf", "worker count or auto"),
        Bad("negative", -1, "-1", "negative"),
        Bad("zero", 0, "0", "less than 1"),
        Bad("fraction", 1.5, "1.5", "worker count or auto"),
        Bad("word", "many", "many", "worker count"),
        Bad("bool", True, "true", "true"),
        Bad("list", [1], None, "expected"),
        Bad("past the most", 1025, "1025", "1025 is more than 1024"),
    ]


BAD_VALUES: dict[type, Callable[[Any], list[Bad]]] = {
    Duration: _duration,
    Number: _number,
    Size: _size,
    Flag: _flag,
    Text: _text,
    ExistingFile: _file,
    ListOf: _list,
    WorkerCount: _workers,
}


def _cases() -> list[Any]:
    cases = []
    for name, kind in SETTING_TYPES.items():
        for bad in BAD_VALUES[type(kind)](kind):
            for source in ("flag", "env", "file"):
                value = bad.toml if source == "file" else bad.text
                if value is None or (name == "config" and source == "file"):
                    continue
                case_id = f"{name}-{source}-{bad.what}"
                cases.append(pytest.param(name, source, value, bad.problem, id=case_id))
    return cases


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("-inf" if value < 0 else "inf")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)  # a TOML basic string, or a number


def _load(name: str, source: str, value: Any, tmp_path: Path) -> tuple[str, Callable[[], Any]]:
    """Where the message must say the value came from, and the load that reads it."""
    key = name.replace("_", "-")
    if source == "flag":
        flag_value = [value] if name in REPEATED_FLAGS else value
        return "--" + key, lambda: load_settings({**BASE, name: flag_value}, environ={})
    if source == "env":
        env = {"LATENCY_PROXY_" + name.upper(): value}
        return "LATENCY_PROXY_" + name.upper(), lambda: load_settings(BASE, environ=env)
    path = tmp_path / "proxy.toml"
    path.write_text(f"{key} = {_toml(value)}\n")
    return f"{path}: {key}", lambda: load_settings({**BASE, "config": str(path)}, environ={})


@pytest.mark.parametrize(("name", "source", "value", "problem"), _cases())
def test_a_bad_value_is_refused_naming_its_source(
    name: str, source: str, value: Any, problem: str, tmp_path: Path
) -> None:
    where, load = _load(name, source, value, tmp_path)
    with pytest.raises(ConfigError) as caught:
        load()
    message = str(caught.value)
    assert message.startswith(where + ": "), message
    assert problem in message and "\n" not in message, message


def test_every_setting_has_a_type_with_bad_values() -> None:
    from latency_proxy.base.config import FIELDS

    assert set(SETTING_TYPES) == set(FIELDS)
    assert all(type(kind) in BAD_VALUES for kind in SETTING_TYPES.values())


def test_the_routes_table_is_checked_entry_by_entry(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    for table, problem in [
        ('[routes]\nllama = "http://[::1"\n', "routes.llama: 'llama=http://[::1' is not a URL"),
        ("[routes]\nllama = 5\n", "routes.llama: expected a URL string, got 5"),
        ('routes = "http://x"\n', "routes: expected a table of MODEL = URL"),
    ]:
        path.write_text(table)
        with pytest.raises(ConfigError, match=f"^{path}: {problem}".replace("[", r"\[")):
            load_settings({"config": str(path)}, environ={})


def test_good_values_from_each_source_are_read_as_their_types(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('port = 7000\nconnect-timeout = 2.5\nmax-body-size = 1\nredact-pattern = "a"')
    env = {"LATENCY_PROXY_CONTINUOUS_USAGE": "off", "LATENCY_PROXY_MAX_HEADERS": "7"}
    s = load_settings({**BASE, "config": str(path), "read_timeout": "1.5"}, environ=env)
    assert (s.port, s.connect_timeout, s.max_body_size) == (7000, 2.5, 1)
    assert s.redact_pattern == ("a",)
    assert (s.continuous_usage, s.max_headers, s.read_timeout) == (False, 7, 1.5)


@pytest.mark.parametrize(
    ("args", "env", "toml", "where"),
    [
        (["--upstream", "http://[::1"], {}, None, "--upstream: "),
        (["--max-headers", "-5"], {}, None, "--max-headers: -5 is negative"),
        (["--ca-bundle", "/nonexistent"], {}, None, "--ca-bundle: /nonexistent does not exist"),
        ([], {"LATENCY_PROXY_CONTINUOUS_USAGE": "maybe"}, None, "LATENCY_PROXY_CONTINUOUS_USAGE: "),
        ([], {}, "connect-timeout = nan", "proxy.toml: connect-timeout: nan is not finite"),
        ([], {}, "port = true", "proxy.toml: port: expected a TCP port"),
    ],
)
def test_the_proxy_exits_2_before_listening(
    args: list[str], env: dict[str, str], toml: str | None, where: str, tmp_path: Path
) -> None:
    if toml is not None:
        (tmp_path / "proxy.toml").write_text(toml + "\n")
        args = ["--config", str(tmp_path / "proxy.toml")]
    if "--upstream" not in args:
        args = [*args, "--upstream", "http://127.0.0.1:1"]
    run = subprocess.run(
        [sys.executable, "-m", "latency_proxy", *args, "--port", "0", "--admin-port", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=30,
    )
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""  # nothing listened, nothing logged
    (line,) = run.stderr.splitlines()
    assert line.startswith("latency-proxy: error: ") and where in line, line
