"""loadgen.sim is a program of its own: it never imports the load generator.

The dependency may only go the other way (loadgen starts the simulator for --embedded runs),
so the simulator can change, ship and start without the load generator. From the proxy it
may use the pure core (units, sse, and the settings' declared types the simulator's data
files are read with), nothing that does I/O; from loadgen only its leaves,
modules that import nothing of the project (the JSON-lines reader).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import loadgen.sim

SIM = Path(loadgen.sim.__file__).parent
# latency_proxy.base.build comes with the package itself: its root chooses compiled or pure
# before any module of it loads
PROXY_CORE = (
    "latency_proxy.base.units",
    "latency_proxy.measure.sse",
    "latency_proxy.base.setting_types",
    "latency_proxy.base.build",
)
# their folder, loaded with them: its __init__ is a docstring
PROXY_FOLDERS = ("latency_proxy.base",)
LEAVES = ("loadgen.inputs.jsonl",)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, lazily inside functions included, as absolute names."""
    package = "loadgen.sim" + "".join(f".{p}" for p in path.parent.relative_to(SIM).parts)
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def outside_the_simulator(name: str) -> bool:
    in_loadgen = name == "loadgen" or name.startswith("loadgen.")
    in_sim = name == "loadgen.sim" or name.startswith("loadgen.sim.")
    in_proxy = name.startswith("latency_proxy.")
    in_core = name in PROXY_CORE + PROXY_FOLDERS
    in_core |= name.startswith(tuple(f"{m}." for m in PROXY_CORE))
    in_leaf = name in LEAVES or name.startswith(tuple(f"{m}." for m in LEAVES))
    return (in_loadgen and not in_sim and not in_leaf) or (in_proxy and not in_core)


def test_no_file_of_the_simulator_imports_the_load_generator() -> None:
    files = sorted(SIM.rglob("*.py"))
    assert SIM / "wire" / "app.py" in files
    found = {
        str(path.relative_to(SIM)): sorted(filter(outside_the_simulator, imported_modules(path)))
        for path in files
    }
    assert {file: names for file, names in found.items() if names} == {}


def test_the_scan_sees_an_import_of_the_load_generator() -> None:
    tree = SIM / "realtime" / "batching.py"
    assert "loadgen.sim.model.sequence" in imported_modules(tree)
    assert outside_the_simulator("loadgen.engine.workload") and outside_the_simulator("loadgen")
    assert outside_the_simulator("latency_proxy.forwarding.forward")
    assert not outside_the_simulator("loadgen.sim.wire.requests")
    assert not outside_the_simulator("loadgen.inputs.jsonl")


def test_starting_the_simulator_loads_no_load_generator_module() -> None:
    code = (
        "import sys, loadgen.sim.wire.app, loadgen.sim.cli\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith(('loadgen', 'latency_proxy'))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(run.stdout.split())
    assert "loadgen.sim.wire.app" in loaded
    # the parent package itself is loaded (its __init__ is a docstring), nothing under it
    assert {m for m in loaded if outside_the_simulator(m)} == {"loadgen"}
