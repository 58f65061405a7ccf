"""The import rules of the architecture, read from the source with `ast`. For the layers, function-local and
type-only imports count (they are dependencies too); for cycles, the imports that run. A package not listed
in LAYERS fails the test, so a new one says where it stands."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]

# A package may import its own layer and the layers below it, never one above.
LAYERS = {
    "gpustack_compiler.base": 0,
    "gpustack_compiler.language": 1,
    "gpustack_compiler.manifest": 2,
    "gpustack_compiler.build": 3,
    "gpustack_compiler.neo4j": 4,
    "gpustack_sim.distributed": 10,
    "gpustack_sim.compiled": 10,
    "gpustack_sim.engine": 11,
    "gpustack_sim.analyses": 12,
    "gpustack_sim.learning": 12,
    "gpustack_sim.power": 12,
    "gpustack_sim.datacenter": 13,
    "gpustack_sim.api": 14,
    "gpustack_sim": 14,  # the package's own __init__: the facade that hands out Engine
    "gpustack_sim.experiments": 15,
    "gpustack_sim.observatory": 16,
    "gpustack_sim.cli": 17,
}


def _module(path: Path) -> tuple[str, str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    name = ".".join(parts)
    return name, name if is_package else name.rpartition(".")[0]


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`: never executed, so no runtime cycle."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for b in node.body for n in ast.walk(b)}
    return out


def _imports(runtime_only: bool = False) -> dict[str, set[str]]:
    """module -> the project modules (or packages) it imports (only those executed, with `runtime_only`)."""
    modules = {}
    for top in ("gpustack_compiler", "gpustack_sim"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name, package = _module(path)
            targets = set()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = _type_only(tree) if runtime_only else set()
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                        target = ".".join([*base, *([node.module] if node.module else [])])
                    else:
                        target = node.module or ""
                    # `from pkg import module` names a module; `from module import name` a name in it
                    targets |= {f"{target}.{a.name}" for a in node.names} | {target}
                elif isinstance(node, ast.Import):
                    targets |= {a.name for a in node.names}
            modules[name] = {t for t in targets if t.split(".")[0] in ("gpustack_compiler", "gpustack_sim")}
    for name, targets in modules.items():  # keep only targets that are modules of the project
        modules[name] = {_nearest(t, modules) for t in targets} - {None, name}
    return modules


def _nearest(target: str, modules) -> str | None:
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def _layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    for i in range(len(parts), 1, -1):  # a top-level name matches only itself (`gpustack_sim` is the facade)
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key, LAYERS[key]
    if module in LAYERS:
        return module, LAYERS[module]
    pytest.fail(f"{module}: its package is in no layer of tests/test_architecture.py LAYERS; add it there")


IMPORTS = _imports()
RUNTIME_IMPORTS = _imports(runtime_only=True)


def test_every_package_has_a_layer():
    for module in IMPORTS:
        if module != "gpustack_compiler":
            _layer(module)


def test_the_compiler_never_imports_the_engine():
    offending = sorted(f"{m} -> {t}" for m, ts in IMPORTS.items() if m.startswith("gpustack_compiler")
                       for t in ts if t.startswith("gpustack_sim"))
    assert offending == []


def test_nothing_imports_upward():
    upward = []
    for module, targets in IMPORTS.items():
        if module == "gpustack_compiler":
            continue
        _, rank = _layer(module)
        for target in targets:
            if target == "gpustack_compiler":
                continue
            _, other_rank = _layer(target)
            if other_rank > rank:
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == []


def test_no_import_cycles_between_modules():
    graph = nx.DiGraph((m, t) for m, ts in RUNTIME_IMPORTS.items() for t in ts)
    # a package's __init__ re-exporting its own modules is not a cycle of the architecture
    graph.remove_edges_from([(m, t) for m, t in list(graph.edges) if t.startswith(m + ".")])
    cycles = [" -> ".join(c) for c in nx.simple_cycles(graph, length_bound=6)]
    assert cycles == []


def test_the_checker_reads_function_local_and_type_only_imports():
    """The rules cannot pass vacuously: the checker sees a function-local import (the facade opening the
    datacenter's bridge on first use) and a type-only one, and keeps the latter out of the runtime graph."""
    assert "gpustack_sim.datacenter.from_engine" in IMPORTS["gpustack_sim.api"]
    assert "gpustack_sim.engine.context" in IMPORTS["gpustack_sim.datacenter.from_engine"]
    assert "gpustack_sim.engine.context" not in RUNTIME_IMPORTS["gpustack_sim.datacenter.from_engine"]
    assert _layer("gpustack_sim.cli.app")[1] > _layer("gpustack_sim.engine.resolver")[1]


def _catalog_names_written(root: Path, names: set[str]) -> list[str]:
    """`file:line: name` for each string constant of the datacenter, observatory and CLI that is a variable
    of the compiled catalog (f-string pieces count: they are constants too)."""
    found = []
    for package in ("datacenter", "observatory", "cli"):
        for path in sorted((root / "gpustack_sim" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}")
    return found


def test_no_catalog_name_is_written_in_the_datacenter_observatory_or_cli(real_manifest):
    """Facts about the catalog live in the catalog: these packages take the variables they read from its
    bindings (catalog/bindings/*.yaml, through engine/facts.py), so a renamed variable is the compiler's
    finding, not a silent miss at run time."""
    names = set(real_manifest["variables"])
    assert "training.t_step" in names  # the check has names to look for
    found = _catalog_names_written(ROOT, names)
    assert not found, "catalog names written in code (bind them in catalog/bindings/):\n" + "\n".join(found)


def test_the_catalog_name_check_finds_a_name_in_code(tmp_path, real_manifest):
    planted = tmp_path / "gpustack_sim" / "observatory" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text('SHOWN = ("training.t_step", f"{1}econ.cost.per_token")\nNOT_A_NAME = "training.t_step.x"\n')
    assert _catalog_names_written(tmp_path, set(real_manifest["variables"])) == [
        "gpustack_sim/observatory/planted.py:1: training.t_step",
        "gpustack_sim/observatory/planted.py:1: econ.cost.per_token"]
