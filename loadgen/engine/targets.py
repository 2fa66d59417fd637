"""Where load goes: a URL, a built-in name (proxy, direct) or a name from a targets file.

A targets file is TOML, one table per target:

    [targets.llama]
    url = "http://10.0.0.5:8000"
    model = "llama-70b"
    headers = { "X-Team" = "perf" }
    api_key_env = "LLAMA_API_KEY"   # the key itself never sits in the file

A URL target is named host:port in results; a file target by its table name.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

VIRTUAL = "virtual:"  # a preset on the simulator's virtual clock (virtual.py), not a server
BUILTIN = {
    "proxy": ("LATENCY_PROXY_URL", "http://127.0.0.1:8080"),
    "direct": ("VLLM_URL", "http://127.0.0.1:8000"),
}


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str  # base URL without /v1
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def endpoint(self, path: str) -> str:
        return self.url.rstrip("/") + path


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def name_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def load_file(path: str | Path) -> dict[str, dict]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    tables = data.get("targets", {})
    if not isinstance(tables, dict):
        raise ValueError(f"{path}: [targets] must be a table of tables")
    return tables


def resolve(
    spec: str,
    file_targets: Mapping[str, dict] | None = None,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, str] | None = None,
) -> Target:
    """A --target value to a Target; `overrides` maps built-in names to URLs (--embedded)."""
    if file_targets and spec in file_targets:
        table = file_targets[spec]
        if "url" not in table:
            raise ValueError(f"target {spec!r} has no url")
        headers = {str(k): str(v) for k, v in table.get("headers", {}).items()}
        key_env = table.get("api_key_env")
        if key_env:
            key = env.get(key_env)
            if not key:
                raise ValueError(f"target {spec!r}: environment variable {key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        return Target(spec, _base(table["url"]), table.get("model"), headers)
    if overrides and spec in overrides:
        return Target(spec, _base(overrides[spec]))
    if spec in BUILTIN:
        variable, default = BUILTIN[spec]
        return Target(spec, _base(env.get(variable) or default))
    if "://" in spec:
        return Target(name_of(spec), _base(spec))
    if spec.startswith(VIRTUAL):
        raise ValueError(
            f"--target {spec}: a virtual target runs in python -m loadgen (and its capacity) only"
        )
    raise ValueError(f"unknown target {spec!r}: give a URL, proxy, direct or a targets-file name")
