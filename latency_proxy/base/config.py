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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latency_proxy.base.setting_types import (
    Duration,
    ExistingFile,
    Flag,
    ListOf,
    Number,
    SettingType,
    Size,
    Text,
    certificate_bundle,
    regular_expression,
    shown,
)
from latency_proxy.base.worker_count import WorkerCount
from latency_proxy.measure.conversation import KEY_BYTES
from latency_proxy.measure.meter import STALL_THRESHOLD_S
from latency_proxy.measure.sse import MAX_EVENT_BYTES

ENV_PREFIX = "LATENCY_PROXY_"
DEFAULT_ROUTE = "default"
# what of prompts and completions is recorded: telemetry/redact.py says what each records
CONTENT_CAPTURE_MODES = ("off", "hash", "redacted", "full")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")


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
    drain_timeout: float = 20.0  # + the telemetry flush (5 s): within a pod's 30 s grace
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
    session_key_file: str | None = None  # else LATENCY_PROXY_SESSION_KEY, else random
    max_sessions: int = 10_000  # agent sessions followed at once (telemetry/sessions.py)
    session_idle: float = 600.0  # a session with no call for this long is closed
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


def parse_route(spec: str) -> Route:
    """'URL' is the default route; 'MODEL=URL' routes requests whose body names MODEL."""
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        name, url = DEFAULT_ROUTE, spec
    url = url.rstrip("/")
    shown = repr(_USERINFO.sub(r"\1…@", spec))  # a password in the URL stays unshown
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # '[::1' (no ']'), a port that is no number or past 65535
        raise ValueError(f"{shown} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown}: expected URL or MODEL=URL with an http(s) URL")
    if port == 0:
        raise ValueError(f"{shown}: port 0 is not a port to connect to; give 1 to 65535")
    if parts.path.rstrip("/").endswith("/v1"):
        raise ValueError(f"{shown}: give the base URL without /v1")
    if not name:
        raise ValueError(f"{shown}: empty model name before '='")
    return Route(name=name, url=url)


def api_key_source(spec: str) -> None:
    route, sep, source = spec.partition("=")
    if not sep or not route or source.partition(":")[0] not in ("env", "file"):
        raise ValueError(f"{_redacted_spec(spec)}: expected ROUTE=env:VAR or ROUTE=file:PATH")


_USERINFO = re.compile(r"(://)[^/@]*@")
_PORT = Number(0, 65535, "a TCP port", whole=True, metavar="")  # 0: any free one

# Each setting's one type and range, whatever its source; a new setting is one line here.
SETTING_TYPES: dict[str, SettingType] = {
    "upstream": ListOf(Text(), parse=parse_route),
    "host": Text(),
    "port": _PORT,
    "admin_host": Text(),
    "admin_port": _PORT,
    "content_capture": Text(CONTENT_CAPTURE_MODES),
    "content_hash_key_file": ExistingFile(),
    "content_max_chars": Number(1, 10**9, "a character count", whole=True),
    "redact_pattern": ListOf(Text(), split=False, parse=regular_expression),
    "audit_hook": Text(),
    "log_level": Text(LOG_LEVELS),
    "log_format": Text(LOG_FORMATS),
    "connect_timeout": Duration(),
    "read_timeout": Duration(),
    "pool_max_connections": Number(1, 100_000, "a connection count", whole=True),
    "max_body_size": Size(),
    "drain_timeout": Duration(positive=False),
    "write_timeout": Duration(positive=False),
    "first_n_tokens": ListOf(Number(1, 1_000_000, "a token count", whole=True), sort=True),
    "stall_threshold": Duration(),
    "continuous_usage": Flag(),
    "provider_name": Text(),
    "max_concurrent_requests": Number(0, 10**6, "a request count (0: no limit)", whole=True),
    "retry_after": Duration(positive=False),
    "max_headers": Number(1, 10_000, "a header count", whole=True),
    "max_header_bytes": Size(),
    "header_timeout": Duration(),
    "body_timeout": Duration(),
    "idle_timeout": Duration(),
    "max_event_bytes": Size(),
    "ca_bundle": ExistingFile(certificate_bundle),
    "upstream_api_key": ListOf(Text(), parse=api_key_source),
    "admin_token_file": ExistingFile(),
    "config": ExistingFile(),
    "workers": WorkerCount(),
    "upstream_keepalive": Duration(),
    "session_key_file": ExistingFile(),
    "max_sessions": Number(1, 10**7, "a session count", whole=True),
    "session_idle": Duration(),
}
SIZE_SETTINGS = tuple(name for name, kind in SETTING_TYPES.items() if isinstance(kind, Size))


def load_settings(flags: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """Read each source, lowest precedence first, each value checked against its type
    with the source named; then the checks across settings."""
    values: dict[str, Any] = {}
    env = _from_env(environ)
    given = {k: v for k, v in flags.items() if v is not None}
    if "config" in given or "config" in env:
        where = "--config" if "config" in given else ENV_PREFIX + "CONFIG"
        path = _read("config", given.get("config", env.get("config")), where)
        values.update(_from_file(path))
    for name, value in env.items():
        values[name] = _read(name, value, ENV_PREFIX + name.upper())
    for name, value in given.items():
        values[name] = _read(name, value, _flag(name))
    return _validated(Settings(**values))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _read(name: str, value: Any, where: str) -> Any:
    """The value as its setting's type holds it; else one line naming the source."""
    try:
        return SETTING_TYPES[name].read(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


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
    except UnicodeDecodeError as exc:  # TOML is UTF-8 (TOML 1.0, "Spec")
        bad = exc.object[exc.start]
        raise ConfigError(
            f"config file {path} is not UTF-8 text: byte {exc.start} is 0x{bad:02x}"
        ) from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name == "routes":
            values["upstream"] = values.get("upstream", ()) + _routes_table(path, value)
        elif name in FIELDS and name != "config":
            read = _read(name, value, f"{path}: {key}")
            values[name] = values.get(name, ()) + read if name == "upstream" else read
        else:
            known = ", ".join(sorted(n.replace("_", "-") for n in FIELDS if n != "config"))
            raise ConfigError(f"config file {path}: unknown key {key!r} (known: {known}, routes)")
    return values


def _routes_table(path: str, table: Any) -> tuple[str, ...]:
    """A config file's [routes]: MODEL = "URL" lines, each checked as --upstream MODEL=URL."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: routes: expected a table of MODEL = URL, got {shown(table)}")
    specs: tuple[str, ...] = ()
    for model, url in table.items():
        where = f"{path}: routes.{model}"
        if not isinstance(url, str):
            raise ConfigError(f"{where}: expected a URL string, got {shown(url)}")
        specs += _read("upstream", f"{model}={url}", where)
    return specs


def _validated(s: Settings) -> Settings:
    """The checks across settings; each setting alone was checked as it was read."""
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
    if s.port == s.admin_port and s.port != 0:
        raise ConfigError("--port and --admin-port must differ")
    for spec in s.upstream_api_key:
        route = spec.partition("=")[0]
        if route not in names:
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


def secret_key(
    file: str | None, flag: str, variable: str, environ: Mapping[str, str]
) -> bytes | None:
    """A key from its file (the flag's), else its environment variable, else None."""
    if file:
        return _read_secret(file, flag)
    value = environ.get(ENV_PREFIX + variable)
    return value.encode() if value else None


def session_key(s: Settings, environ: Mapping[str, str] = os.environ) -> bytes:
    """The key of every session hash: --session-key-file, LATENCY_PROXY_SESSION_KEY, or
    random for this process (then hashes agree within the process only). Never written."""
    given = secret_key(s.session_key_file, "--session-key-file", "SESSION_KEY", environ)
    return given if given is not None else os.urandom(KEY_BYTES)


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
