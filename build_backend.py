"""The build backend: setuptools', which also asks for mypy (mypyc) when a wheel is built
and may be compiled (setup.py). An editable install runs pure, so it does not download it."""

from __future__ import annotations

import os

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 - every hook setuptools has, as it has it

MYPY = "mypy>=1.11"


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    requires = build_meta.get_requires_for_build_wheel(config_settings)
    pure = os.environ.get("LATENCY_PROXY_PURE", "") not in ("", "0")
    return requires if pure else [*requires, MYPY]
