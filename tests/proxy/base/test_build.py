"""Compiled or pure: LATENCY_PROXY_PURE=1 runs the .py files even beside their extensions,
the proxy says which runs, and a run can demand the build it expects (.ci/run does)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from latency_proxy.base import build
from tests.deploy.test_install import wait_ok
from tests.support import ROOT

EXPECT_ENV = "LATENCY_PROXY_EXPECT_HOT_PATH"  # .ci/run: the build each suite run must test


def _environ(**env: str) -> dict[str, str]:
    """This process's environment without the proxy's settings or an OTLP exporter's."""
    own = (build.PURE_ENV, "LATENCY_PROXY_", "OTEL_")
    return {k: v for k, v in os.environ.items() if not k.startswith(own)} | env


def _python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_environ(**env), cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _built() -> bool:
    """Whether this tree has the extensions beside the sources (a compiled build)."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    first = ROOT / (build.COMPILED[0].replace(".", "/") + ".py")
    return first.with_suffix(suffix).exists()


def test_every_compiled_module_has_its_source() -> None:
    for name in build.COMPILED:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.parametrize("value", ["1", "yes"])
def test_pure_loads_every_module_from_source(value: str) -> None:
    code = (
        "import importlib, latency_proxy.base.build as n\n"
        "files = [importlib.import_module(m).__file__ for m in n.COMPILED]\n"
        "print(n.running(), all(f.endswith('.py') for f in files))"
    )
    assert _python(code, LATENCY_PROXY_PURE=value) == "pure True"


def test_without_the_switch_the_build_decides() -> None:
    code = "import latency_proxy.base.build as n; print(n.running())"
    for off in ("", "0"):
        assert _python(code, LATENCY_PROXY_PURE=off) == ("compiled" if _built() else "pure")


def test_version_and_the_listening_line_say_which_runs() -> None:
    expected = "compiled" if _built() else "pure"
    cli = [sys.executable, "-m", "latency_proxy"]
    for env, kind in (({}, expected), ({build.PURE_ENV: "1"}, "pure")):
        environ = _environ(**env)
        done = subprocess.run(
            [*cli, "--version"], capture_output=True, text=True, env=environ, cwd=ROOT
        )
        assert done.stdout.strip().endswith(f"({kind})"), done.stdout
        proxy = subprocess.Popen(
            [*cli, "--upstream", "http://127.0.0.1:9", "--port", "0", "--admin-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environ, cwd=ROOT,
        )  # fmt: skip
        try:
            assert proxy.stdout is not None
            listening = json.loads(proxy.stdout.readline())
            # up, its signal handlers in place (a SIGTERM between the listening line and
            # the server's start is not waited for here)
            assert wait_ok(f"http://{listening['admin']}/healthz", proxy) == 200
        finally:
            proxy.terminate()
            proxy.communicate(timeout=30)
        assert listening["msg"] == "listening" and listening["hot_path"] == kind, listening


def test_the_hot_path_is_the_build_this_run_expects() -> None:
    """.ci/run runs the default suite on the editable (pure) install, then on the compiled
    build, and says which it expects: a build that silently fell back fails here."""
    expected = os.environ.get(EXPECT_ENV)
    if expected is None:
        pytest.skip(f"{EXPECT_ENV} not set (.ci/run sets it)")
    assert build.running() == expected


def test_finder_ignores_modules_it_does_not_own(tmp_path: Path) -> None:
    finder = build._SourceFirst()
    assert finder.find_spec("latency_proxy.base.config", [str(ROOT / "latency_proxy")]) is None
    spec = finder.find_spec(build.COMPILED[0], [str(tmp_path)])
    assert spec is None  # no source in that directory: the next finder decides
