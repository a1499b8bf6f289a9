"""ARCHITECTURE.md names only what exists: every file path, and every symbol it pins to a file.

Read out of the document, never copied here:
- a backticked path (it has a `/`, or ends in a file suffix) exists, relative to the repository
  root; a bare file name (`builder.py`) is taken in the folder the same table row or bullet last
  named (`graph/`, or `reporting/` within `evals/`); `*` and `<word>` match any characters (`rules_<backend>.txt`);
- a backticked `file.py` followed by backticked names (`tools/harness/stats.py` `NOISE_FLOOR`,
  `DECIDED_WIDTH`) defines each name: a class, function, assignment or annotated field, or an import
  (read with ast); a dotted name (`RunContext.schedule`) has every part defined in that file;
- a backticked `folder/module.symbol` (`graph/routing.to_work`) is `folder/module.py` defining it.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOC = ROOT / "ARCHITECTURE.md"
LIMIT = 25_000  # characters: the document is a map; the detail lives in the modules' docstrings

SUFFIXES = (".py", ".txt", ".json", ".md", ".toml", ".jsonl", ".sqlite")
TICK = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
MODULE_SYMBOL = re.compile(r"((?:[a-z_]+/)+[a-z_0-9]+)\.([A-Za-z_][A-Za-z0-9_.]*)")
# between a file and its symbols, or between two symbols: spaces, commas, `and`, `/`, parentheses
JOINER = re.compile(r"[\s,/()]*(?:and|or)?[\s,/()]*")
# files a run or a user writes, named as what they are, not as files of the repository
WRITTEN = {"summary.json", "run.json", "torch_compile.json", "report.json", "best_kernel.py", "plans.jsonl",
           "insights.jsonl", "evaluations.jsonl", "timeline.jsonl", "checkpoints.sqlite", "accelopt.toml",
           "result.json", "task.json", "reference.py", "baseline.py"}


def _blocks(text: str) -> list[str]:
    """Table rows and list items on their own, paragraphs whole: the scope of a folder named."""
    blocks, current = [], []
    for line in text.splitlines():
        starts = line.startswith(("|", "- ", "#")) or not line.strip()
        if starts and current:
            blocks.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line)
    return [*blocks, "\n".join(current)] if current else blocks


def _is_path(token: str) -> bool:
    return " " not in token and (token.endswith("/") or token.endswith(SUFFIXES)) and not token.startswith("-")


def _bases(folders: tuple[str, ...]) -> list[Path]:
    return [*(ROOT / f for f in folders if f), ROOT]


def _exists(token: str, folders: tuple[str, ...]) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", token.rstrip("/"))
    return any(any(base.glob(pattern)) if "*" in pattern else (base / pattern).exists() for base in _bases(folders))


def _where(token: str, folders: tuple[str, ...]) -> Path | None:
    return next((base / token for base in _bases(folders) if (base / token).is_file()), None)


@cache
def _defined(path: Path) -> frozenset[str]:
    """Every name the module binds anywhere: classes, functions, assignment and annotation targets,
    keyword-less imports, and class attributes."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.add(leaf.id)
                    elif isinstance(leaf, ast.Attribute):
                        names.add(leaf.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def _symbols_after(block: str, end: int) -> list[str]:
    """The backticked names that follow a file, joined only by spaces, commas, `and`, `/`."""
    found = []
    while (joined := JOINER.match(block, end)) and (tick := TICK.match(block, joined.end())):
        if not NAME.fullmatch(tick.group(1)) or _is_path(tick.group(1)):
            break
        found.append(tick.group(1))
        end = tick.end()
    return found


def references(text: str) -> tuple[list[tuple[str, str]], list[tuple[Path, str, str]]]:
    """(paths: (token, the folders it may be named in)), (symbols: (file, symbol, token)) the document names."""
    paths, symbols = [], []
    for block in _blocks(text):
        top = folder = ""
        for tick in TICK.finditer(block):
            token = tick.group(1)
            if _is_path(token):
                folders = (folder, top)
                if token in WRITTEN and not _exists(token, folders):
                    continue
                paths.append((token, folders))
                if token.endswith("/") and (ROOT / token).is_dir():
                    top = folder = token
                elif token.endswith("/") and top and (ROOT / top / token).is_dir():
                    folder = top + token
                if token.endswith(".py") and (file := _where(token, folders)):
                    symbols += [(file, name, token) for name in _symbols_after(block, tick.end())]
            elif (m := MODULE_SYMBOL.fullmatch(token)) and (ROOT / f"{m.group(1)}.py").is_file():
                symbols.append((ROOT / f"{m.group(1)}.py", m.group(2), token))
            elif m:
                paths.append((f"{m.group(1)}.py", ()))  # a module named with its symbol must exist
    return paths, symbols


def test_the_document_fits_its_limit():
    assert len(DOC.read_text()) <= LIMIT, f"ARCHITECTURE.md is {len(DOC.read_text())} characters (limit {LIMIT})"


def test_every_path_it_names_exists():
    paths, _ = references(DOC.read_text())
    assert len(paths) > 50  # the reader found them
    missing = sorted({f"{token} (in {folders[0] or 'the root'})" for token, folders in paths if not _exists(token, folders)})
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def test_every_symbol_it_pins_to_a_file_is_defined_there():
    _, symbols = references(DOC.read_text())
    assert len(symbols) > 50
    missing = sorted({f"{token} `{name}`" for path, name, token in symbols
                      if not set(name.split(".")) <= _defined(path)})
    assert not missing, f"ARCHITECTURE.md names symbols their files do not define: {missing}"


@pytest.mark.parametrize("text, wrong", [
    ("- `graph/builder.py` `no_such_function`", "symbol"),
    ("- `graph/no_such_module.py` holds it", "path"),
    ("| `graph/` | `no_such.py` |", "path"),
    ("- `graph/routing.no_such_route`", "symbol"),
    ("- `nodes/context.py` `RunContext.no_such_field`", "symbol"),
])
def test_the_checks_fail_on_a_wrong_name(text, wrong):
    paths, symbols = references(text)
    bad_paths = [t for t, folders in paths if not _exists(t, folders)]
    bad_symbols = [n for p, n, _ in symbols if not set(n.split(".")) <= _defined(p)]
    assert (bad_paths if wrong == "path" else bad_symbols), (paths, symbols)


def test_a_right_name_passes():
    paths, symbols = references("| `graph/` | `builder.py`, `routing.py` |\n- `tools/harness/stats.py` "
                                "`NOISE_FLOOR`, `DECIDED_WIDTH` and `graph/routing.to_work`; `rules_<backend>.txt`")
    assert {t for t, _ in paths} >= {"graph/", "builder.py", "routing.py", "tools/harness/stats.py"}
    assert all(_exists(t, f) for t, f in paths if t != "rules_<backend>.txt")
    assert [n for _, n, _ in symbols] == ["NOISE_FLOOR", "DECIDED_WIDTH", "to_work"]
    assert all(set(n.split(".")) <= _defined(p) for p, n, _ in symbols)
