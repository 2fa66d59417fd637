"""The layout holds: each package's docstring names exactly the modules it has (the module
map, which cannot drift), and imports go down the layers, never back up."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(
    path.parent
    for top in ("latency_proxy", "loadgen")
    for path in (ROOT / top).rglob("__init__.py")
)
NAMED = re.compile(r"^- `(\w+)(\.py|/)`", re.M)

# What each layer may import beyond itself (packages by dotted name; a root module, such as
# latency_proxy.cli, belongs to its top package, which composes and is imported by none).
# Shared by every layer of the proxy: its base (the settings, as uvicorn's protocols read
# uvicorn.config; units and ASGI types; the telemetry names).
PROXY = "latency_proxy"
LOADGEN = "loadgen"
SHARED = {f"{PROXY}.base"}
MAY_IMPORT: dict[str, set[str]] = {
    PROXY: {"*"},
    f"{PROXY}.workers": {f"{PROXY}.{p}" for p in ("process", "upstream", "telemetry")},
    f"{PROXY}.process": {
        f"{PROXY}.{p}"
        for p in ("forwarding", "server", "upstream", "telemetry", "record", "measure")
    },
    f"{PROXY}.forwarding": {
        f"{PROXY}.{p}" for p in ("server", "upstream", "telemetry", "record", "measure")
    },
    f"{PROXY}.server": set(),
    f"{PROXY}.upstream": set(),
    f"{PROXY}.telemetry": {f"{PROXY}.record", f"{PROXY}.measure"},
    f"{PROXY}.record": {f"{PROXY}.measure"},
    f"{PROXY}.measure": set(),
    f"{PROXY}.base": {f"{PROXY}.measure"},
    # the top level holds only entry points: `python -m loadgen` and the locustfile
    LOADGEN: {f"{LOADGEN}.commands", f"{LOADGEN}.locust"},
    # a second engine and its own command (`python -m loadgen.locust`, which checks its
    # extras as `python -m loadgen` does): loadgen's workload and measurements under Locust
    f"{LOADGEN}.locust": {
        f"{LOADGEN}.commands.extras",
        *(f"{LOADGEN}.{p}" for p in ("reports", "runs", "engine", "replay", "analysis")),
    },
    f"{LOADGEN}.commands": {
        f"{LOADGEN}.{p}"
        for p in (
            *("drivers", "shards", "plan", "stack", "reports", "capacity", "runs"),
            *("engine", "replay", "analysis", "sim"),
        )
    },
    f"{LOADGEN}.drivers": {
        f"{LOADGEN}.{p}" for p in ("shards", "stack", "runs", "engine", "replay", "analysis", "sim")
    },
    f"{LOADGEN}.shards": {
        f"{LOADGEN}.{p}" for p in ("runs", "reports", "engine", "stack", "analysis")
    },
    # a plan's candidates are the simulator's presets, vLLM's flags applied to each as to a
    # virtual: target's (engine/virtual.py)
    f"{LOADGEN}.plan": {
        f"{LOADGEN}.capacity",
        f"{LOADGEN}.engine",
        f"{LOADGEN}.analysis",
        f"{LOADGEN}.sim.model",
        f"{LOADGEN}.sim.vllm_flags",
    },
    f"{LOADGEN}.reports": {f"{LOADGEN}.capacity", f"{LOADGEN}.runs", f"{LOADGEN}.analysis"},
    f"{LOADGEN}.stack": {f"{LOADGEN}.engine", f"{LOADGEN}.analysis"},
    f"{LOADGEN}.capacity": {f"{LOADGEN}.analysis"},
    # a run's settings are the engine's, the replay's and the analysis' settings together
    f"{LOADGEN}.runs": {f"{LOADGEN}.engine", f"{LOADGEN}.replay", f"{LOADGEN}.analysis"},
    # a virtual: target's load runs on the simulator's twin instead of a socket
    f"{LOADGEN}.engine": {f"{LOADGEN}.replay", f"{LOADGEN}.analysis", f"{LOADGEN}.sim"},
    f"{LOADGEN}.replay": {f"{LOADGEN}.analysis"},
    f"{LOADGEN}.analysis": set(),
    f"{LOADGEN}.inputs": set(),
    # the simulator's commands compose its five layers: the engine model at the bottom, vLLM's
    # flags applied to it, driven in real time behind vLLM's interface, or on a virtual clock
    # as a deployment's twin (which reads vLLM's flags as the server does)
    f"{LOADGEN}.sim": {
        f"{LOADGEN}.sim.{p}" for p in ("model", "vllm_flags", "realtime", "wire", "twin")
    },
    f"{LOADGEN}.sim.twin": {f"{LOADGEN}.sim.model", f"{LOADGEN}.sim.vllm_flags"},
    f"{LOADGEN}.sim.wire": {f"{LOADGEN}.sim.{p}" for p in ("model", "vllm_flags", "realtime")},
    f"{LOADGEN}.sim.vllm_flags": {f"{LOADGEN}.sim.model"},
    f"{LOADGEN}.sim.realtime": {f"{LOADGEN}.sim.model"},
    f"{LOADGEN}.sim.model": set(),
}
# leaves of loadgen: modules that import nothing of loadgen outside their folder, so every
# layer (the simulator and the pure analysis too) may share them
LEAVES = {f"{LOADGEN}.inputs"}
# what loadgen takes of the proxy: the measuring core, and the names, units and value types
# (a flag's number is checked as a setting's is) it shares
FROM_THE_PROXY = {
    f"{PROXY}.measure",
    f"{PROXY}.base.units",
    f"{PROXY}.base.setting_types",
    f"{PROXY}.base.semconv",
}
# the packages whose folders are layers in one order: no two import each other
ORDERED = (PROXY, LOADGEN)


def _modules(package: Path) -> set[str]:
    files = {p.stem for p in package.glob("*.py")} - {"__init__", "__main__"}
    folders = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    return files | folders


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_docstring_names_each_module_it_has(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named = {name for name, _ in NAMED.findall(doc)}
    assert sorted(_modules(package) - named) == [], "modules the package docstring misses"
    assert sorted(named - _modules(package)) == [], "named in the docstring, not in the folder"


def _layer(module: str) -> str:
    """The layer a module belongs to: its package, or its top package for a root module (a
    package imported by name, `from loadgen import replay`, is its own layer)."""
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        candidate = ".".join(parts[:depth])
        if candidate in MAY_IMPORT:
            return candidate
    return parts[0]


def _imports(path: Path) -> set[str]:
    """What a module imports, for types only (`if TYPE_CHECKING:`) too: a type from a layer
    above is an import back up all the same."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {n for n in names if n.split(".")[0] in (PROXY, LOADGEN)}


def _allowed(source: str, target: str) -> bool:
    leaf = any(target == s or target.startswith(s + ".") for s in LEAVES)
    if leaf and source.startswith(LOADGEN):
        return True
    if target in SHARED or any(target.startswith(s + ".") for s in SHARED):
        return True
    if source.startswith(LOADGEN) and target.startswith(PROXY):
        return any(target == s or target.startswith(s + ".") for s in FROM_THE_PROXY)
    layer = _layer(source)
    if _layer(target) == layer:
        return True
    allowed = MAY_IMPORT[layer]
    return "*" in allowed or any(target == a or target.startswith(a + ".") for a in allowed)


def _source_files() -> list[Path]:
    return sorted(p for top in (PROXY, LOADGEN) for p in (ROOT / top).rglob("*.py"))


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_imports_go_down_the_layers() -> None:
    wrong = []
    for path in _source_files():
        module = _module(path)
        wrong += [f"{module} -> {t}" for t in sorted(_imports(path)) if not _allowed(module, t)]
    assert wrong == []


def _two_way(edges: set[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


@pytest.mark.parametrize("top", ORDERED)
def test_no_two_layers_import_each_other(top: str) -> None:
    """What the rules allow and what the code does: neither has a pair of layers that each
    import the other (a layer beside another is fine; one that leans both ways is a knot)."""
    allowed = {(a, b) for a, targets in MAY_IMPORT.items() for b in targets if a.startswith(top)}
    assert _two_way(allowed) == []
    done = {
        (_layer(_module(path)), _layer(target))
        for path in (ROOT / top).rglob("*.py")
        for target in _imports(path)
        if target.startswith(top)
    }
    assert _two_way({(a, b) for a, b in done if a != b}) == []


@pytest.mark.parametrize(
    "leaf",
    sorted(p for s in LEAVES for p in (ROOT / s.replace(".", "/")).glob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_leaf_imports_nothing_of_loadgen_outside_its_folder(leaf: Path) -> None:
    folder = _module(leaf).rpartition(".")[0]
    imported = {t for t in _imports(leaf) if t.split(".")[0] == LOADGEN}
    assert {t for t in imported if not t.startswith(folder + ".")} == set()


def _top_level_imported_back(graph: dict[str, set[str]]) -> list[str]:
    """Imports of loadgen's top-level modules by the modules of its folders: the top level
    composes the layers, none of them needs it."""

    def in_a_folder(module: str) -> bool:
        return (ROOT.joinpath(*module.split(".")[:2]) / "__init__.py").exists()

    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        if in_a_folder(source)
        for target in targets
        if target.startswith(f"{LOADGEN}.") and not in_a_folder(target)
    )


def test_no_loadgen_folder_imports_the_top_level() -> None:
    graph = {_module(p): _imports(p) for p in (ROOT / LOADGEN).rglob("*.py")}
    assert _top_level_imported_back(graph) == []


def test_the_layer_rules_catch_an_import_back_up() -> None:
    assert not _allowed("latency_proxy.measure.meter", "latency_proxy.forwarding.relay")
    assert not _allowed("latency_proxy.telemetry.spans", "latency_proxy.cli")  # the root
    assert not _allowed("latency_proxy.base.config", "latency_proxy.telemetry.redact")
    assert _two_way({("a", "b"), ("b", "c"), ("b", "a")}) == [("a", "b")]
    assert not _allowed("loadgen.analysis.summary", "loadgen.engine.runner")
    assert not _allowed("loadgen.engine.runner", "latency_proxy.forwarding.relay")
    assert not _allowed("loadgen.capacity.advice", "loadgen.reports.capacity")
    assert not _allowed("loadgen.replay.prompts", "loadgen.engine.workload")
    assert not _allowed("loadgen.runs.config", "loadgen.commands.cli")
    assert not _allowed("loadgen.locust.node", "loadgen.commands.run")
    assert not _allowed("loadgen.shards.merge", "loadgen.rundir")  # the top level
    imports = {
        "loadgen.shards.merge": {"loadgen.rundir", "loadgen.runs.rundir.read"},
        "loadgen.__main__": {"loadgen.commands.cli.main"},
    }
    assert _top_level_imported_back(imports) == ["loadgen.shards.merge -> loadgen.rundir"]
    assert _allowed("latency_proxy.forwarding.relay", "latency_proxy.measure.meter")


MODULE_LINES = 450
FUNCTION_LINES = 80
SAYS_WHY = "Long because"  # a docstring that goes on to say why a module or function is long


def _too_long(path: Path, name: str) -> list[str]:
    """A module or function past its size whose docstring does not say why."""
    text = path.read_text()
    tree = ast.parse(text)
    found = []
    if text.count("\n") > MODULE_LINES and SAYS_WHY not in (ast.get_docstring(tree) or ""):
        found.append(f"{name}: {text.count(chr(10))} lines")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > FUNCTION_LINES and SAYS_WHY not in (ast.get_docstring(node) or ""):
                found.append(f"{name}:{node.name}: {lines} lines")
    return found


def test_modules_and_functions_are_short_or_say_why() -> None:
    found = [problem for path in _source_files() for problem in _too_long(path, _module(path))]
    assert found == []


def test_the_size_rule_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    long = tmp_path / "long.py"
    long.write_text(f"def f():\n{body}\n")
    said = tmp_path / "said.py"
    said.write_text(f'def f():\n    """{SAYS_WHY} it is a table."""\n{body}\n')
    assert len(_too_long(long, "long")) == 1 and _too_long(said, "said") == []


def _tests_of(package: Path) -> Path:
    """Where a package's tests live: tests/proxy, tests/sim and tests/loadgen mirror the tree."""
    parts = package.relative_to(ROOT).parts
    if parts[0] == PROXY:
        return ROOT / "tests" / "proxy" / Path(*parts[1:])
    if parts[1:2] == ("sim",):
        return ROOT / "tests" / "sim" / Path(*parts[2:])
    return ROOT / "tests" / "loadgen" / Path(*parts[1:])


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_has_its_tests_in_the_mirrored_folder(package: Path) -> None:
    assert list(_tests_of(package).glob("test_*.py")), _tests_of(package)
