"""Helpers the tests share: processes, receivers, upstreams, tolerances (fixtures: conftest.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
