"""Settings precedence (flags > env > file > defaults) and clear errors at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from latency_proxy.base.config import ConfigError, Route, load_settings, upstream_credentials
from tests.support import ROOT


def test_defaults_and_routes() -> None:
    s = load_settings({"upstream": ["http://a:8000/", "qwen-72b=http://b:8001"]}, environ={})
    assert s.routes == (Route("default", "http://a:8000"), Route("qwen-72b", "http://b:8001"))
    assert (s.port, s.admin_port, s.content_capture, s.first_n_tokens) == (8080, 9464, "off", (3,))
    assert s.default_route == Route("default", "http://a:8000")
    assert s.stall_threshold == 1.0
    assert (
        load_settings({"upstream": ["http://a"], "stall_threshold": "250ms"}).stall_threshold
        == 0.25
    )


def test_flags_beat_env_beat_file(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(
        'port = 7000\nadmin-port = 7001\nread-timeout = "10s"\n'
        'first-n-tokens = [1, 5]\n[routes]\nllama = "http://f:1"\n'
    )
    env = {
        "LATENCY_PROXY_PORT": "7100",
        "LATENCY_PROXY_CONFIG": str(config),
        "LATENCY_PROXY_CONTINUOUS_USAGE": "true",
    }
    s = load_settings({"port": "7200"}, environ=env)
    assert (s.port, s.admin_port, s.read_timeout, s.first_n_tokens) == (7200, 7001, 10.0, (1, 5))
    assert s.continuous_usage is True
    assert s.routes == (Route("llama", "http://f:1"),)
    s = load_settings({}, environ={**env, "LATENCY_PROXY_UPSTREAM": "http://e:1 m=http://e:2"})
    assert [r.name for r in s.routes] == ["default", "m"]
    assert s.port == 7100


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "no upstream"),
        ({"upstream": ["ftp://x"]}, "http(s) URL"),
        ({"upstream": ["http://x:8000/v1"]}, "without /v1"),
        ({"upstream": ["a=http://x", "a=http://y"]}, "more than once"),
        ({"upstream": ["http://x"], "read_timeout": "soon"}, "--read-timeout"),
        ({"upstream": ["http://x"], "max_body_size": "lots"}, "--max-body-size"),
        ({"upstream": ["http://x"], "content_capture": "everything"}, "--content-capture"),
        ({"upstream": ["http://x"], "port": "9464"}, "must differ"),
        ({"upstream": ["http://x"], "first_n_tokens": "0"}, "--first-n-tokens"),
        ({"upstream": ["http://x"], "read_timeout": "0s"}, "--read-timeout: 0 is zero"),
        ({"upstream": ["http://x"], "connect_timeout": "0"}, "--connect-timeout: 0 is zero"),
        ({"upstream": ["http://x"], "stall_threshold": "0s"}, "--stall-threshold: 0 is zero"),
        ({"upstream": ["http://x"], "upstream_keepalive": "0"}, "--upstream-keepalive: 0 is zero"),
        ({"upstream": ["http://x"], "upstream_keepalive": "4 days"}, "--upstream-keepalive: not"),
    ],
)
def test_bad_settings_say_what_and_how(flags: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(flags, environ={})


def test_unknown_file_key_is_named(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('upstreem = "http://x"\n')
    with pytest.raises(ConfigError, match="unknown key 'upstreem'"):
        load_settings({"config": str(config)}, environ={})


def test_cli_exits_2_with_a_one_line_error() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "latency_proxy", "--upstream", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert run.returncode == 2
    assert run.stderr.strip().startswith("latency-proxy: error: --upstream: 'nope'")
    assert "Traceback" not in run.stderr


def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes('provider-name = "caf\u00e9"\n'.encode("latin-1"))
    run = subprocess.run(
        [sys.executable, "-m", "latency_proxy", "--upstream", "http://x", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"latency-proxy: error: config file {config} is not UTF-8")
    assert "byte 20" in run.stderr  # where: the é in Latin-1 (0xe9)
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


def test_example_config_loads() -> None:
    s = load_settings({"config": str(ROOT / "examples" / "latency-proxy.toml")}, environ={})
    assert [r.name for r in s.routes] == ["llama-70b", "qwen-72b"]
    assert s.first_n_tokens == (1, 3, 10)


@pytest.mark.parametrize(
    ("flags", "admin_host", "exposed"),
    [
        ({"host": "0.0.0.0"}, "127.0.0.1", False),  # the main port's address is not the admin's
        ({"admin_host": "0.0.0.0"}, "0.0.0.0", True),
        ({"admin_host": "::"}, "::", True),
        ({"admin_host": "10.1.2.3"}, "10.1.2.3", True),
        ({"admin_host": "proxy.internal"}, "proxy.internal", True),
        ({"admin_host": "::1"}, "::1", False),
        ({"admin_host": "localhost"}, "localhost", False),
    ],
)
def test_admin_port_stays_on_loopback_unless_told(flags: dict, admin_host: str, exposed: bool):
    s = load_settings({"upstream": ["http://a:8000"], **flags}, environ={})
    assert (s.admin_host, s.admin_exposed) == (admin_host, exposed)


def test_main_port_elsewhere_leaves_the_admin_port_on_loopback(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--host", "127.0.0.2")  # ready at 127.0.0.1
    (listening,) = [line for line in proxy.log_lines() if line["msg"] == "listening"]
    assert listening["main"].startswith("127.0.0.2:")
    assert listening["admin"] == f"127.0.0.1:{proxy.admin_port}"
    assert "without a token" not in proxy.output()


def test_help_shows_each_setting_default_read_back_from_settings() -> None:
    """--help states the defaults Settings holds (their one source), in a form the flag reads."""
    from latency_proxy.cli import build_parser, shown_default

    defaults = load_settings({"upstream": ["http://127.0.0.1:1"]})
    shown = {a.dest: shown_default(a.dest) for a in build_parser()._actions}
    assert shown["read_timeout"] == "5m" and shown["max_body_size"] == "16MiB"
    assert shown["max_concurrent_requests"] == "0" and shown["upstream"] is None
    for name, text in shown.items():
        if text is not None and name != "first_n_tokens":
            flags = {"upstream": ["http://127.0.0.1:1"], name: text}
            assert getattr(load_settings(flags), name) == getattr(defaults, name), name


def test_content_settings_are_flags_too() -> None:
    from latency_proxy.cli import build_parser

    args = build_parser().parse_args(
        ["--redact-pattern", "a+", "--redact-pattern", "b+", "--content-max-chars", "10"]
    )
    flags = {k: v for k, v in vars(args).items() if v is not None}
    settings = load_settings({**flags, "upstream": ["http://127.0.0.1:1"]})
    assert settings.redact_pattern == ("a+", "b+") and settings.content_max_chars == 10


@pytest.mark.parametrize(
    ("seconds", "text"), [(600.0, "10m"), (0.025, "25ms"), (1.5, "1500ms"), (300.0, "5m")]
)
def test_durations_format_as_they_parse(seconds: float, text: str) -> None:
    from latency_proxy.base.units import format_duration, format_size, parse_duration, parse_size

    assert format_duration(seconds) == text and parse_duration(text) == seconds
    assert parse_size(format_size(16 * 2**20)) == 16 * 2**20 and format_size(1000) == "1000"


@pytest.mark.parametrize("bad", ["\r\n", "\n", "\r", "\x00", "\x01", "\x1b", "\x7f"])
def test_a_route_key_with_a_byte_no_header_value_may_hold_is_refused(bad: str) -> None:
    s = load_settings({"upstream": ["m=http://a:1"], "upstream_api_key": ["m=env:K"]}, {})
    with pytest.raises(ConfigError) as caught:
        upstream_credentials(s, {"K": f"sk-SECRET{bad}KEY"})
    assert "RFC 9110" in str(caught.value) and "SECRET" not in str(caught.value)
    # a tab or a space inside is a valid field value (vLLM compares the whole token)
    assert upstream_credentials(s, {"K": " sk-a\tb c\n"}) == {"m": "sk-a\tb c"}


def test_a_route_key_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(b"sk-\xff\xfe")
    s = load_settings({"upstream": ["m=http://a:1"], "upstream_api_key": [f"m=file:{path}"]}, {})
    with pytest.raises(ConfigError, match="not UTF-8"):
        upstream_credentials(s, {})
