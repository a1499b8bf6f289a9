"""No function of the project's own code is over MAX_LINES lines (issue 68): a longer one is split
at its seams (a phase, a concern) into functions whose names and docstrings say why.

The project's own code: every .py of the checkout but the test suite, build outputs (build/, the
mypy tree), hidden folders (.venv, .carry, caches), runs/ (what runs write) and the kernels vendored
verbatim from other people (evals/realworld/solutions/, evals/realworld/accelopt_bests/). A
function's length is its `def` line (decorators not counted) to its last line, docstring included."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tests.conftest import ROOT

MAX_LINES = 80
SKIPPED_DIRS = {"tests", "build", "runs", "__pycache__"}  # and every hidden folder (.venv, .carry, ...)
VENDORED = ("evals/realworld/solutions/", "evals/realworld/accelopt_bests/")


def project_files(root: Path) -> list[Path]:
    """The project's own .py files under `root` (see the module's docstring)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        if rel.as_posix().startswith(VENDORED):
            continue
        out.append(path)
    return out


def long_functions(source: str, name: str, limit: int = MAX_LINES) -> list[str]:
    """`NAME:LINE FUNCTION (N lines)` for each function or method (nested ones too) over `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_of_the_project_is_over_80_lines():
    files = project_files(ROOT)
    too_long = [hit for path in files
                for hit in long_functions(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert not too_long, (f"{len(too_long)} functions over {MAX_LINES} lines: split each at its seams\n"
                          + "\n".join(too_long))


def test_the_walk_covers_the_project_and_skips_tests_and_vendored_kernels():
    files = {p.relative_to(ROOT).as_posix() for p in project_files(ROOT)}
    for own in ("cli/app.py", "graph/routing.py", "tools/harness/runner.py", "tools/harness/ahead_worker.py",
                "evals/bench_realworld.py"):
        assert own in files
    assert not any(f.startswith(("tests/", "build/", ".venv/", *VENDORED)) for f in files)


def _function(name: str, body_lines: int, prefix: str = "def") -> str:
    return f"{prefix} {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(body_lines))


def test_the_check_names_every_function_over_the_limit_and_no_other():
    source = "\n".join([
        _function("fits", MAX_LINES - 1),                         # 80 lines with its def: fits
        _function("too_long", MAX_LINES),                         # 81
        _function("awaited", MAX_LINES, prefix="async def"),      # 81, async
        "class Holder:\n" + textwrap.indent(_function("method", MAX_LINES + 5), "    "),
        "def outer():\n" + textwrap.indent(_function("inner", MAX_LINES), "    ") + "    return inner\n",
    ])
    hits = long_functions(source, "example.py")
    named = sorted(hit.split()[1] for hit in hits)
    assert named == ["awaited", "inner", "method", "outer", "too_long"]
    assert "example.py:82 too_long (81 lines)" in hits
    assert long_functions(_function("fits", MAX_LINES - 1), "example.py") == []
