"""`latency-proxy` / `python -m latency_proxy`: flags, environment and config file to Settings,
then one process serves (process/), or a supervisor and its workers (workers/)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence

from latency_proxy.base import build
from latency_proxy.base.config import (
    CONTENT_CAPTURE_MODES,
    FIELDS,
    LOG_FORMATS,
    LOG_LEVELS,
    SETTING_TYPES,
    SIZE_SETTINGS,
    ConfigError,
    admin_token,
    load_settings,
    session_key,
    upstream_credentials,
)
from latency_proxy.base.units import format_duration, format_size
from latency_proxy.process.app import ProxyApp
from latency_proxy.process.serving import serve
from latency_proxy.telemetry.logs import configure
from latency_proxy.telemetry.redact import content_policy
from latency_proxy.upstream.fd_limit import raise_soft_limit
from latency_proxy.workers.supervisor import Supervisor

log = logging.getLogger("latency_proxy")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="latency-proxy",
        description="Measuring streaming reverse proxy for OpenAI-compatible LLM servers. "
        "Every flag has an environment twin LATENCY_PROXY_<FLAG> (e.g. LATENCY_PROXY_UPSTREAM); "
        "flags win over the environment, which wins over --config.",
    )
    _listening(p.add_argument_group("listening"))
    _upstream(p.add_argument_group("upstream"))
    _clients(p.add_argument_group("client connections"))
    _measuring(p.add_argument_group("measuring"))
    _content(p.add_argument_group("content and secrets"))
    p.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {build.VERSION} ({build.running()})",  # compiled or pure
        help="the version, and whether the hot path runs compiled or pure",
    )
    _with_ranges_and_defaults(p)
    return p


def _with_ranges_and_defaults(p: argparse.ArgumentParser) -> None:
    """Each setting flag's help ends with its range and default, from the one table."""
    for action in p._actions:
        kind = SETTING_TYPES.get(action.dest)
        if kind is not None and action.metavar is None and kind.metavar:
            action.metavar = kind.metavar
        if kind is not None and kind.limits:
            action.help = f"{action.help}; {kind.limits}"
        shown = shown_default(action.dest)
        if shown is not None:
            action.help = f"{action.help} (default {shown})"


def _listening(group: argparse._ArgumentGroup) -> None:
    """Where the proxy listens, how many processes, its logs and settings file."""
    add = group.add_argument
    add(
        "--upstream",
        action="append",
        metavar="[MODEL=]URL",
        help="upstream base URL without /v1; a bare URL is the default route, MODEL=URL routes "
        "requests whose body names MODEL (repeatable)",
    )
    add("--host", help="main port bind address")
    add("--port", help="main port")
    add(
        "--workers",
        help="processes serving the main port (SO_REUSEPORT), one admin port for all; "
        "auto: the CPUs this process may use (affinity and cgroup quota)",
    )
    add(
        "--admin-host",
        help="admin port bind address, whatever --host is (/metrics lists models, routes and "
        "traffic): give 0.0.0.0 where the pod network may scrape it",
    )
    add("--admin-port", help="admin port: /metrics, /healthz, /readyz")
    add("--log-level", choices=LOG_LEVELS, help="log level")
    add("--log-format", choices=LOG_FORMATS, help="json: one object per line; text: for a terminal")
    add("--config", metavar="FILE.toml", help="settings file; keys are the flag names")


def _upstream(group: argparse._ArgumentGroup) -> None:
    """The proxy's own client: timeouts, pool, TLS and credentials."""
    add = group.add_argument
    add("--connect-timeout", help="upstream connect timeout")
    add("--read-timeout", help="longest silence from the upstream, before or during a response")
    add("--pool-max-connections", help="upstream connections per route")
    add(
        "--upstream-keepalive",
        help="how long an idle upstream connection is kept for reuse; keep it below the "
        "upstream's own keep-alive (vLLM: VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5s), or a request "
        "may go out as the upstream closes the connection and fail with 502",
    )
    add("--ca-bundle", help="CA certificates for https upstreams")
    add(
        "--upstream-api-key",
        action="append",
        metavar="ROUTE=env:VAR|ROUTE=file:PATH",
        help="API key sent upstream on that route as a bearer token (repeatable); never logged",
    )
    add(
        "--continuous-usage",
        action="store_const",
        const=True,
        default=None,
        help="ask vLLM upstreams for usage on every chunk (tokens per chunk) and strip it "
        "for clients that did not ask",
    )


def _clients(group: argparse._ArgumentGroup) -> None:
    """What a client may send and how long it may take, enforced as bytes arrive."""
    add = group.add_argument
    add(
        "--write-timeout",
        help="longest a send to the client may wait for it to read; then the stream ends, "
        "the connection is aborted, recorded client_abort; also how long a closing "
        "connection may take to flush; 0: never",
    )
    add("--max-body-size", help="largest request body; larger gets 413")
    add("--drain-timeout", help="on SIGTERM, how long in-flight streams may take to finish")
    add(
        "--max-concurrent-requests",
        help="model calls in flight before new ones get 503 + Retry-After; 0: no limit",
    )
    add("--retry-after", help="Retry-After sent with that 503")
    add("--max-headers", help="request header count limit, else 431")
    add("--max-header-bytes", help="request header size limit, else 431")
    add(
        "--header-timeout",
        help="longest time from a connection's accept, or a later request's first byte, to "
        "the end of the request's headers; then the connection is closed",
    )
    add(
        "--body-timeout",
        help="longest time from the end of a request's headers to the end of its body; "
        "then 408 and the connection is closed",
    )
    add(
        "--idle-timeout",
        help="how long a kept-alive client connection may wait for its next request",
    )
    add(
        "--max-event-bytes",
        help="an SSE event still incomplete past this size passes through unmetered and is "
        "counted in latency_proxy_oversized_events_total",
    )


def _measuring(group: argparse._ArgumentGroup) -> None:
    """What is measured of a stream, and how agent sessions are followed."""
    add = group.add_argument
    add(
        "--first-n-tokens",
        metavar="N[,N…]",
        help="token counts for time-to-first-N-tokens",
    )
    add("--stall-threshold", help="a gap between tokens longer than this counts as a stall")
    add("--provider-name", help="gen_ai.provider.name on spans")
    add(
        "--session-key-file",
        help="key of the hashes that follow agent sessions (one per deployment: processes "
        "with the same key hash alike); default LATENCY_PROXY_SESSION_KEY, else random",
    )
    add("--max-sessions", help="agent sessions followed at once; past it the least recent ends")
    add("--session-idle", help="an agent session with no call for this long ends")


def _content(group: argparse._ArgumentGroup) -> None:
    """What of prompts and completions is recorded; the keys and tokens."""
    add = group.add_argument
    add(
        "--content-capture",
        choices=CONTENT_CAPTURE_MODES,
        help="what prompt/completion text is recorded; off: none",
    )
    add(
        "--content-hash-key-file",
        help="HMAC key for --content-capture hash (or LATENCY_PROXY_CONTENT_HASH_KEY)",
    )
    add(
        "--redact-pattern",
        action="append",
        metavar="REGEX",
        help="--content-capture redacted: also replace what this matches (repeatable)",
    )
    add(
        "--audit-hook",
        metavar="MODULE:FUNCTION",
        help="--content-capture redacted: gets the scrubbed text, returns what to record "
        "(None: nothing)",
    )
    add("--content-max-chars", help="longest text part recorded when --content-capture is not off")
    add(
        "--admin-token-file",
        help="require this bearer token for /metrics (or LATENCY_PROXY_ADMIN_TOKEN)",
    )


def shown_default(name: str) -> str | None:
    """A setting's default as a flag would spell it; None when there is nothing to show."""
    spec = FIELDS.get(name)
    if spec is None:
        return None
    value = spec.default
    if (
        value is dataclasses.MISSING
        or value is None
        or value is False
        or value == ()
        or value == ""
    ):
        return None
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, float):
        return format_duration(value)
    if name in SIZE_SETTINGS:
        return format_size(value)
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if v is not None}
    try:
        settings = load_settings(flags)
        policy = content_policy(settings)
        credentials = upstream_credentials(settings)
        token = admin_token(settings)
        key = session_key(settings)
        app = (
            ProxyApp(settings, policy, credentials, token, session_key=key)
            if settings.workers == 1
            else None
        )
    except ConfigError as exc:
        print(f"latency-proxy: error: {exc}", file=sys.stderr)
        return 2
    configure(settings.log_level, settings.log_format)
    if settings.admin_exposed and token is None:
        log.warning(
            "the admin port listens on %s without a token: /metrics lists models, routes and "
            "traffic to anyone who can reach it; give --admin-token-file, or bind it to "
            "127.0.0.1 where nothing else scrapes it",
            settings.admin_host,
        )
    if settings.content_capture == "full":
        log.warning(
            "content capture is FULL: prompt and completion text will be recorded in "
            "spans and logs; use only where those sinks may hold it"
        )
    open_files = raise_soft_limit()  # before any socket, and inherited by every worker
    try:
        if app is None:
            return Supervisor(settings, flags, credentials, token, open_files).serve()
        serve(settings, app, open_files)
    except OSError as exc:
        print(f"latency-proxy: error: cannot listen: {exc.strerror}", file=sys.stderr)
        return 1
    return 0
