"""Run tests/js/check.mjs: Grafana's LogQL/TraceQL grammars and prometheus-operator's models.

The npm packages are installed on first use (`npm ci --prefix tests/js`, from the committed
lockfile); without node and npm the calling test is skipped, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.support import ROOT

JS = ROOT / "tests" / "js"


def _ready() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for Grafana's LogQL/TraceQL grammars")
    if not (JS / "node_modules").is_dir():
        subprocess.run(
            ["npm", "ci", "--prefix", str(JS), "--no-audit", "--no-fund"],
            check=True,
            capture_output=True,
            timeout=300,
        )


def check(logql: list[str] = (), traceql: list[str] = (), crds: list[dict] = ()) -> dict:
    """Error offsets per query (empty: it parses) and an error message per object (None: valid)."""
    _ready()
    payload = json.dumps({"logql": list(logql), "traceql": list(traceql), "crds": list(crds)})
    done = subprocess.run(
        ["node", str(JS / "check.mjs")],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)
