"""tools/pyparse: parses serialized across threads, the interpreter's spurious SystemError retried."""

import ast
import threading
from pathlib import Path

import pytest

from accelopt.tools import pyparse


def test_parses_from_many_threads_agree_with_a_plain_parse():
    with open(pyparse.__file__) as f:
        source = f.read() * 20
    expected = ast.dump(ast.parse(source))
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(ast.dump(pyparse.parse(source)))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20 and set(results) == {expected}


def test_the_spurious_recursion_depth_error_is_retried_and_others_are_not(monkeypatch):
    calls = []
    real = ast.parse

    def flaky(source, **kw):
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=51, after=47)")
        return real(source, **kw)

    monkeypatch.setattr(pyparse.ast, "parse", flaky)
    assert isinstance(pyparse.parse("x = 1"), ast.Module) and len(calls) == 2
    with pytest.raises(SyntaxError):
        pyparse.parse("def (")  # the source's own error is not retried
    assert len(calls) == 3

    def broken(source, **kw):
        raise SystemError("something else")

    monkeypatch.setattr(pyparse.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        pyparse.parse("x = 1")


# Copied verbatim into a task's folder and run by the judge in a process of its own (no graph
# threads there, and no accelopt to import).
STANDALONE = {"evals/interop/kernelbench_reference.py"}


def test_every_parse_of_ours_goes_through_the_lock():
    """A direct ast.parse in any module of ours can collide with a parse in another graph branch
    (CI failed that way on a policy's parse while tools/pyparse existed beside it)."""
    from tests.conftest import ROOT
    from tests.unit.test_floors import FLOORS, _modules

    direct = []
    for _, path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel in STANDALONE or path == Path(pyparse.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "parse"
                    and isinstance(node.value, ast.Name) and node.value.id == "ast"):
                direct.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.module == "ast" and any(a.name == "parse" for a in node.names):
                direct.append(f"{rel}:{node.lineno}")
    assert len(FLOORS) > 5 and not direct, f"ast.parse outside tools/pyparse.py: {direct}"
