"""The floors of the house: every module imports only from its own floor or the ones below, no
node imports another node (shared services live in nodes/services.py), and no modules import each
other in a circle, not even through an import inside a function."""

import ast
from pathlib import Path

from tests.conftest import ROOT

# policies sit between the nodes that ask them and the tools they use: a policy sees no graph state.
# memory (insights, their store and recall) imports nothing of ours but itself: the ground floor
FLOORS = {"cli": 6, "evals": 5, "graph": 4, "nodes": 3, "policies": 2, "tools": 1, "memory": 0}
# modules of the node layer that are not nodes: types, helpers and services every node may use
NODE_HELPERS = {"common", "context", "state", "records", "services", "measurements", "seeding", "preflight",
                "schedule"}


def _modules():
    for top in FLOORS:
        for path in (ROOT / top).rglob("*.py"):
            # folders without __init__.py (task folders: reference.py, baseline.py) hold data that
            # the harness loads, not modules of ours
            if all((folder / "__init__.py").is_file() for folder in path.parents if folder.is_relative_to(ROOT / top)):
                yield top, path


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return out


def _name(top: str, path: Path) -> str:
    """The module's import name: accelopt.TOP.PACKAGE.MODULE (a package's __init__.py: the package)."""
    parts = path.relative_to(ROOT / top).with_suffix("").parts
    return ".".join(("accelopt", top, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _targets(path: Path, known: set[str]) -> set[str]:
    """The modules of ours that path imports, wherever the import stands (in a function, under
    TYPE_CHECKING): `from P import N` imports the module P.N where there is one, else P."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            out |= subs | ({node.module} & known if len(subs) < len(node.names) else set())
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names} & known
    return out


def _circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Each set of modules that import one another in a circle (a module on a cycle, with every
    module it reaches that reaches it back)."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in graph}
    return sorted({tuple(sorted(n for n in reached[m] if m in reached[n])) for m in graph if m in reached[m]})


def _import_graph() -> dict[str, set[str]]:
    paths = {_name(top, path): path for top, path in _modules()}
    return {name: _targets(path, set(paths)) - {name} for name, path in paths.items()}


def _runs_up(top: str, module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "accelopt" and len(parts) > 1 and parts[1] in FLOORS and FLOORS[parts[1]] > FLOORS[top]


def test_no_arrow_runs_up_the_floors():
    wrong = []
    for top, path in _modules():
        for line, module in _imports(path):
            if module.split(".")[0] in FLOORS:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} outside the accelopt namespace")
            elif _runs_up(top, module):
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({top}) imports {module}: an arrow running up")
    assert not wrong, "\n".join(wrong)


def test_no_node_imports_another_node():
    wrong = []
    for path in (ROOT / "nodes").glob("*.py"):
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["accelopt", "nodes"] and len(parts) > 2 and parts[2] not in NODE_HELPERS:
                wrong.append(f"nodes/{path.name}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    """A circle of imports, even one hidden by an import inside a function, ties its modules into
    one: none can be read, tested or moved without the others."""
    circles = _circles(_import_graph())
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_floor_rules_see_a_violation(tmp_path):
    """The checks above read real import statements (a test that cannot fail is a defect)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from accelopt.cli.app import app\nimport tools.task\n")
    assert [m for _, m in _imports(bad)] == ["accelopt.cli.app", "tools.task"]
    assert sum(1 for _ in _modules()) > 40
    assert {top for top, _ in _modules()} == set(FLOORS)
    assert _runs_up("memory", "accelopt.tools.task") and not _runs_up("tools", "accelopt.memory.schema")


def test_the_cycle_check_sees_a_circle_through_a_function_local_import(tmp_path):
    (tmp_path / "a.py").write_text("def later():\n    from accelopt.evals.b import render\n")
    (tmp_path / "b.py").write_text("from accelopt.evals import a\n")
    known = {"accelopt.evals.a", "accelopt.evals.b"}
    graph = {f"accelopt.evals.{m}": _targets(tmp_path / f"{m}.py", known) for m in "ab"}
    assert graph == {"accelopt.evals.a": {"accelopt.evals.b"}, "accelopt.evals.b": {"accelopt.evals.a"}}
    assert _circles({**graph, "accelopt.evals.c": {"accelopt.evals.a"}}) == [("accelopt.evals.a", "accelopt.evals.b")]
    assert _name("tools", ROOT / "tools" / "harness" / "__init__.py") == "accelopt.tools.harness"
    real = _import_graph()
    assert len(real) > 40 and "accelopt.tools.task" in real["accelopt.cli.app"]  # imported inside its commands


def test_policies_sit_between_the_nodes_and_the_tools():
    """Nodes ask policies; a policy imports tools and memory, never nodes or the graph (its
    requests are typed records, not state); tools and memory import no policy."""
    assert not _runs_up("nodes", "accelopt.policies.choice")
    assert not _runs_up("policies", "accelopt.tools.llm") and not _runs_up("policies", "accelopt.memory.schema")
    assert _runs_up("policies", "accelopt.nodes.context") and _runs_up("policies", "accelopt.graph.builder")
    assert _runs_up("tools", "accelopt.policies.interface") and _runs_up("memory", "accelopt.policies.replies")
