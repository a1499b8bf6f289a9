"""tools/pyparse: parses serialized across threads, the interpreter's spurious SystemError retried."""

import ast
import threading

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
