"""The floors of the house: every module imports only from its own floor or the ones below,
and no node imports another node (shared services live in nodes/services.py)."""

import ast
from pathlib import Path

from tests.conftest import ROOT

FLOORS = {"cli": 4, "evals": 3, "graph": 2, "nodes": 1, "tools": 0, "memory": 0}
# modules of the node layer that are not nodes: types, helpers and services every node may use
NODE_HELPERS = {"common", "context", "state", "records", "services", "measurements", "policies", "seeding"}


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


def test_no_arrow_runs_up_the_floors():
    wrong = []
    for top, path in _modules():
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] in FLOORS:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} outside the accelopt namespace")
            elif parts[0] == "accelopt" and len(parts) > 1 and parts[1] in FLOORS:
                if FLOORS[parts[1]] > FLOORS[top]:
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


def test_the_floor_rules_see_a_violation(tmp_path):
    """The checks above read real import statements (a test that cannot fail is a defect)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from accelopt.cli.app import app\nimport tools.task\n")
    assert [m for _, m in _imports(bad)] == ["accelopt.cli.app", "tools.task"]
    assert sum(1 for _ in _modules()) > 40
