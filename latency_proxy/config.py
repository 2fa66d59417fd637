"""Settings: flags > environment (LATENCY_PROXY_<FLAG>) > config file (TOML) > defaults.

Everything is validated once at start, so a typo fails loudly before the first request
instead of half-way through a load test.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latency_proxy.units import parse_duration, parse_size

ENV_PREFIX = "LATENCY_PROXY_"
DEFAULT_ROUTE = "default"
CONTENT_CAPTURE_MODES = ("off",)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message says which and how to fix it."""


@dataclass(frozen=True, slots=True)
class Route:
    """An upstream base URL (no /v1) and the model name that selects it."""

    name: str
    url: str

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)


@dataclass(frozen=True, slots=True)
class Settings:
    upstream: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    admin_host: str | None = None  # None: same as host
    admin_port: int = 9464
    content_capture: str = "off"
    log_level: str = "info"
    log_format: str = "json"
    connect_timeout: float = 5.0
    read_timeout: float = 300.0
    pool_max_connections: int = 1024
    max_body_size: int = 16 * 2**20
    drain_timeout: float = 30.0
    first_n_tokens: tuple[int, ...] = (3,)
    continuous_usage: bool = False
    provider_name: str = "vllm"
    config: str | None = None
    routes: tuple[Route, ...] = field(default=(), compare=False)

    @property
    def default_route(self) -> Route | None:
        for route in self.routes:
            if route.name == DEFAULT_ROUTE:
                return route
        return None

    @property
    def effective_admin_host(self) -> str:
        return self.admin_host or self.host


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
        if name == "upstream":
            return tuple(_as_list(value))
        if name == "first_n_tokens":
            return tuple(sorted({int(item) for item in _as_list(value)}))
        if name in ("port", "admin_port", "pool_max_connections"):
            return int(value)
        if name in ("connect_timeout", "read_timeout", "drain_timeout"):
            return parse_duration(value)
        if name == "max_body_size":
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
    if s.pool_max_connections < 1:
        raise ConfigError("--pool-max-connections must be at least 1")
    if not s.first_n_tokens or min(s.first_n_tokens) < 1:
        raise ConfigError("--first-n-tokens: give positive token counts, e.g. 3 or 1,3,10")
    return dataclasses.replace(s, routes=tuple(routes))
