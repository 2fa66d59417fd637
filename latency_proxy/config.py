"""Settings: flags > environment (LATENCY_PROXY_<FLAG>) > config file (TOML) > defaults.

Everything is validated once at start, so a typo fails loudly before the first request
instead of half-way through a load test.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latency_proxy.measure.meter import STALL_THRESHOLD_S
from latency_proxy.measure.sse import MAX_EVENT_BYTES
from latency_proxy.telemetry.redact import MODES, ContentPolicy, load_audit_hook
from latency_proxy.units import parse_duration, parse_size
from latency_proxy.workers.count import check_workers, parse_workers

ENV_PREFIX = "LATENCY_PROXY_"
DEFAULT_ROUTE = "default"
CONTENT_CAPTURE_MODES = MODES
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
SIZE_SETTINGS = ("max_body_size", "max_header_bytes", "max_event_bytes")  # read as sizes


class ConfigError(ValueError):
    """A setting is missing or malformed; the message says which and how to fix it."""


@dataclass(frozen=True, slots=True)
class Route:
    """An upstream base URL (no /v1) and the model name that selects it."""

    name: str
    url: str
    # read from the URL once (every request's CLIENT span names them)
    host: str = field(init=False, repr=False, compare=False)
    port: int = field(init=False, repr=False, compare=False)
    # the URL without the user and password it may carry (those go upstream as Basic
    # credentials, never into a log line)
    shown_url: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        object.__setattr__(self, "host", parts.hostname or "")
        object.__setattr__(self, "port", parts.port or (443 if parts.scheme == "https" else 80))
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        object.__setattr__(self, "shown_url", shown.geturl())


@dataclass(frozen=True, slots=True)
class Settings:
    upstream: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1  # processes serving the main port; auto: the CPUs the process may use
    admin_host: str = "127.0.0.1"  # never follows --host: /metrics inventories the pod
    admin_port: int = 9464
    content_capture: str = "off"
    content_hash_key_file: str | None = None
    content_max_chars: int = 8192
    redact_pattern: tuple[str, ...] = ()
    audit_hook: str | None = None
    log_level: str = "info"
    log_format: str = "json"
    connect_timeout: float = 5.0
    read_timeout: float = 300.0
    pool_max_connections: int = 1024
    # an idle upstream connection is dropped after this, below vLLM's uvicorn keep-alive
    # (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): a request must not go out as the server closes it
    upstream_keepalive: float = 4.0
    max_body_size: int = 16 * 2**20
    drain_timeout: float = 30.0
    write_timeout: float = 30.0  # a client not reading for this long is let go; 0: never
    first_n_tokens: tuple[int, ...] = (3,)
    stall_threshold: float = STALL_THRESHOLD_S  # a longer gap between tokens is a stall
    continuous_usage: bool = False
    provider_name: str = "vllm"
    max_concurrent_requests: int = 0  # 0: unlimited
    retry_after: float = 1.0
    max_headers: int = 100
    max_header_bytes: int = 32 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 60.0  # end of the head to end of the body (nginx's 60 s)
    idle_timeout: float = 75.0
    max_event_bytes: int = MAX_EVENT_BYTES
    ca_bundle: str | None = None
    upstream_api_key: tuple[str, ...] = ()  # ROUTE=env:VAR or ROUTE=file:PATH
    admin_token_file: str | None = None
    config: str | None = None
    routes: tuple[Route, ...] = field(default=(), compare=False)

    @property
    def default_route(self) -> Route | None:
        for route in self.routes:
            if route.name == DEFAULT_ROUTE:
                return route
        return None

    @property
    def admin_exposed(self) -> bool:
        """The admin port listens beyond this host (0.0.0.0, a pod or host address)."""
        if self.admin_host == "localhost":
            return False
        try:
            return not ipaddress.ip_address(self.admin_host).is_loopback
        except ValueError:
            return True  # a name: whatever it resolves to, not known to be loopback


FIELDS = {f.name: f for f in dataclasses.fields(Settings) if f.name != "routes"}


def load_settings(flags: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """Merge the sources in precedence order and validate the result."""
    merged: dict[str, Any] = {}
    config_path = flags.get("config") or environ.get(ENV_PREFIX + "CONFIG")
    if config_path:
        merged.update(_from_file(config_path))
    merged.update(_from_env(environ))
    merged.update({k: v for k, v in flags.items() if v is not None})
    values = {name: _coerce(name, value) for name, value in merged.items()}
    settings = Settings(**values)
    return _validated(settings)


def _from_env(environ: Mapping[str, str]) -> dict[str, str]:
    found = {}
    for name in FIELDS:
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None and value != "":
            found[name] = value
    return found


def _from_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name == "routes" and isinstance(value, dict):
            values.setdefault("upstream", [])
            values["upstream"] = list(values["upstream"]) + [f"{k}={v}" for k, v in value.items()]
            continue
        if name not in FIELDS:
            known = ", ".join(sorted(n.replace("_", "-") for n in FIELDS))
            raise ConfigError(f"config file {path}: unknown key {key!r} (known: {known}, routes)")
        values[name] = value
    return values


_SPLIT = re.compile(r"[,\s]+")


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [item for item in _SPLIT.split(value) if item]
    if isinstance(value, Sequence):
        return [str(item) for item in value]
    return [str(value)]


def _coerce(name: str, value: Any) -> Any:
    flag = "--" + name.replace("_", "-")
    try:
        if name in ("upstream", "upstream_api_key"):
            return tuple(_as_list(value))
        if name == "redact_pattern":
            return tuple(value) if isinstance(value, list | tuple) else (str(value),)
        if name == "first_n_tokens":
            return tuple(sorted({int(item) for item in _as_list(value)}))
        if name == "workers":
            return parse_workers(value)
        if name in (
            "port",
            "admin_port",
            "pool_max_connections",
            "max_concurrent_requests",
            "max_headers",
            "content_max_chars",
        ):
            return int(value)
        if name in (
            "connect_timeout",
            "read_timeout",
            "drain_timeout",
            "write_timeout",
            "retry_after",
            "header_timeout",
            "body_timeout",
            "idle_timeout",
            "stall_threshold",
            "upstream_keepalive",
        ):
            return parse_duration(value)
        if name in SIZE_SETTINGS:
            return parse_size(value)
        if name == "continuous_usage":
            if isinstance(value, bool):
                return value
            return str(value).strip().lower() in ("1", "true", "yes", "on")
        return value if value is None else str(value)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def parse_route(spec: str) -> Route:
    """'URL' is the default route; 'MODEL=URL' routes requests whose body names MODEL."""
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        name, url = DEFAULT_ROUTE, spec
    url = url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--upstream {spec!r}: expected URL or MODEL=URL with an http(s) URL")
    if parts.path.rstrip("/").endswith("/v1"):
        raise ConfigError(f"--upstream {spec!r}: give the base URL without /v1")
    if not name:
        raise ConfigError(f"--upstream {spec!r}: empty model name before '='")
    return Route(name=name, url=url)


def _validated(s: Settings) -> Settings:
    if not s.upstream:
        raise ConfigError(
            "no upstream: give --upstream URL (or MODEL=URL, repeatable), "
            f"{ENV_PREFIX}UPSTREAM, or 'upstream' in the config file"
        )
    routes = [parse_route(spec) for spec in s.upstream]
    names = [route.name for route in routes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"--upstream: route {', '.join(duplicates)} given more than once")
    if s.content_capture not in CONTENT_CAPTURE_MODES:
        raise ConfigError(
            f"--content-capture {s.content_capture!r}: "
            f"choose one of {', '.join(CONTENT_CAPTURE_MODES)}"
        )
    if s.log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level {s.log_level!r}: choose one of {', '.join(LOG_LEVELS)}")
    if s.log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format {s.log_format!r}: choose one of {', '.join(LOG_FORMATS)}")
    for name in ("port", "admin_port"):
        if not 0 <= getattr(s, name) <= 65535:
            raise ConfigError(f"--{name.replace('_', '-')}: not a TCP port")
    if s.port == s.admin_port and s.port != 0:
        raise ConfigError("--port and --admin-port must differ")
    workers_problem = check_workers(s.workers)
    if workers_problem is not None:
        raise ConfigError(workers_problem)
    if s.pool_max_connections < 1:
        raise ConfigError("--pool-max-connections must be at least 1")
    if not s.first_n_tokens or min(s.first_n_tokens) < 1:
        raise ConfigError("--first-n-tokens: give positive token counts, e.g. 3 or 1,3,10")
    if s.stall_threshold <= 0:
        raise ConfigError("--stall-threshold: give a positive duration, e.g. 1s")
    if s.max_event_bytes < 1:
        raise ConfigError("--max-event-bytes: give a size, e.g. 4MiB")
    for name in (
        "header_timeout",
        "body_timeout",
        "idle_timeout",
        "connect_timeout",
        "read_timeout",
        "upstream_keepalive",
    ):
        if getattr(s, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')}: give a positive duration, e.g. 10s")
    if s.max_concurrent_requests < 0:
        raise ConfigError("--max-concurrent-requests: 0 (unlimited) or more")
    for spec in s.upstream_api_key:
        route, sep, _ = spec.partition("=")
        if not sep or route not in names:
            raise ConfigError(
                f"--upstream-api-key {_redacted_spec(spec)}: expected ROUTE=env:VAR "
                f"or ROUTE=file:PATH with ROUTE one of {', '.join(names)}"
            )
    return dataclasses.replace(s, routes=tuple(routes))


def _redacted_spec(spec: str) -> str:
    route, _, source = spec.partition("=")
    kind = source.split(":", 1)[0] if ":" in source else "?"
    return f"{route}={kind}:…"


def _read_secret(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as file:
            value = file.read().strip()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if not value:
        raise ConfigError(f"{what}: {path} is empty")
    return value


def content_policy(s: Settings, environ: Mapping[str, str] = os.environ) -> ContentPolicy:
    """The content policy the settings describe; refuses what cannot work (hash without key)."""
    key = None
    if s.content_hash_key_file:
        key = _read_secret(s.content_hash_key_file, "--content-hash-key-file")
    elif environ.get(ENV_PREFIX + "CONTENT_HASH_KEY"):
        key = environ[ENV_PREFIX + "CONTENT_HASH_KEY"].encode()
    try:
        hook = load_audit_hook(s.audit_hook) if s.audit_hook else None
        return ContentPolicy(
            s.content_capture,
            hash_key=key,
            patterns=s.redact_pattern,
            audit_hook=hook,
            max_chars=s.content_max_chars,
        )
    except re.error as exc:
        raise ConfigError(f"--redact-pattern: not a regular expression ({exc.msg})") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def upstream_credentials(s: Settings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Route name -> API key, from the environment or a file; values are never logged, and
    one that cannot be a header value is refused here rather than sent upstream."""
    keys: dict[str, str] = {}
    for spec in s.upstream_api_key:
        route, _, source = spec.partition("=")
        kind, _, ref = source.partition(":")
        what = f"--upstream-api-key {route}={kind}:{ref}"
        if kind == "env":
            value = environ.get(ref, "")
            if not value:
                raise ConfigError(f"{what}: variable is not set")
            key = value.strip()
        elif kind == "file":
            try:
                key = _read_secret(ref, f"--upstream-api-key {route}").decode()
            except UnicodeDecodeError:
                raise ConfigError(f"{what}: the key is not UTF-8 text (not shown)") from None
        else:
            raise ConfigError(
                f"--upstream-api-key {_redacted_spec(spec)}: use env:VAR or file:PATH"
            )
        if _FIELD_VALUE_FORBIDDEN.search(key):
            raise ConfigError(
                f"{what}: the key holds CR, LF, NUL or another control character, which a "
                "header value must not (RFC 9110 §5.5; it would inject header lines "
                "upstream); the key is not shown"
            )
        keys[route] = key
    return keys


# what RFC 9110 §5.5 does not allow in a field value: the controls but HTAB, and DEL
_FIELD_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def admin_token(s: Settings, environ: Mapping[str, str] = os.environ) -> str | None:
    """Bearer token required for the admin port's /metrics, if configured."""
    if s.admin_token_file:
        return _read_secret(s.admin_token_file, "--admin-token-file").decode()
    return environ.get(ENV_PREFIX + "ADMIN_TOKEN") or None
