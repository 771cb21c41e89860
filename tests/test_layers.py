"""The import rule, read from the source: a layer never imports one above it (placer/ < envs/ < agents/ <
experiments/), the library never imports the command line, and no module of placer/, envs/ or agents/ imports itself
back through others. Lazy imports inside functions count: they run too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("placer", "envs", "agents", "experiments")
"""Bottom to top."""


def _modules() -> dict[str, Path]:
    modules = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project's modules that importing `name` runs: each one named, and the packages above it that
    `name` is not inside (importing placer.cost.compare runs placer/cost/__init__.py first)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            named.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                         for alias in node.names)
    found = set()
    for module in named:
        while module and module not in MODULES:
            module = module.rpartition(".")[0]  # a name imported from a module, or a module outside the project
        while module and not (name == module or name.startswith(module + ".")):
            if module in MODULES:
                found.add(module)
            module = module.rpartition(".")[0]
    return found


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    return module.split(".")[0]


def _cycles(layer: str) -> list[list[str]]:
    """The strongly connected components of more than one module among `layer`'s imports (Tarjan)."""
    nodes = sorted(m for m in IMPORTS if _layer(m) == layer)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(IMPORTS[module]):
            if _layer(other) != layer:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in nodes:
        if module not in index:
            visit(module)
    return cycles


def _upward(layer: str) -> list[str]:
    above = LAYERS[LAYERS.index(layer) + 1:]
    return sorted(f"{module} imports {other}" for module, imported in IMPORTS.items() if _layer(module) == layer
                  for other in imported if _layer(other) in above)


def test_the_walk_sees_the_imports_it_checks():
    assert "placer.cost.targets" in IMPORTS["placer.cost"]
    assert {"placer.cost", "placer.cost.compare"} <= IMPORTS["placer.calibrate"]  # a lazy import, and its package
    assert "agents.launch" in IMPORTS["agents.cli"] and "placer.cli" in IMPORTS["agents.cli"]


def test_placer_imports_nothing_from_envs_agents_or_experiments():
    assert _upward("placer") == []


def test_envs_imports_nothing_from_agents_or_experiments():
    assert _upward("envs") == []


def test_agents_import_nothing_from_experiments():
    assert _upward("agents") == []


def test_no_module_of_placer_imports_itself_back_through_others():
    assert _cycles("placer") == []


def test_no_module_of_envs_imports_itself_back_through_others():
    assert _cycles("envs") == []


def test_no_module_of_agents_imports_itself_back_through_others():
    assert _cycles("agents") == []


def test_the_graph_layer_imports_no_placement_cost_or_measurement():
    allowed = ("placer.graph", "placer.errors", "placer.devices", "placer.timeline")
    offenders = sorted(f"{module} imports {other}" for module, imported in IMPORTS.items()
                       if module.startswith("placer.graph") for other in imported
                       if not any(other == a or other.startswith(a + ".") for a in allowed))
    assert offenders == []


def test_the_library_never_imports_the_command_line():
    command_line = ("placer.cli", "placer.commands")
    offenders = sorted(f"{module} imports {other}" for module, imported in IMPORTS.items()
                       if _layer(module) == "placer" and not module.startswith(command_line)
                       for other in imported if other.startswith(command_line))
    assert offenders == []
