"""tools/pyparse: parses serialized across threads, the interpreter's spurious SystemError retried."""

import ast
import dataclasses
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


# ---------------------------------------------------------------- the shared parse (program / parsed)

def test_one_text_is_one_program_read_from_every_thread():
    text = "import triton\n\nBLOCK = 128\n"
    first = pyparse.program(text)
    assert pyparse.program("".join(["import triton\n", "\nBLOCK = 128\n"])) is first  # by the text, not the str object
    assert pyparse.parsed(text) is first.tree and first.dump == ast.dump(ast.parse(text))
    assert pyparse.program(text + "# a comment\n") is not first
    assert pyparse.program(text + "# a comment\n").dump == first.dump  # what program_key compares
    other = "x = 2\n" * 200
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(pyparse.program(other))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(p is seen[0] for p in seen)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.tree = None  # type: ignore[misc]


def test_a_text_that_does_not_parse_raises_its_own_error_each_time(monkeypatch):
    calls = []
    real = ast.parse
    monkeypatch.setattr(pyparse.ast, "parse", lambda source, **kw: calls.append(source) or real(source, **kw))
    errors = []
    for _ in range(2):
        with pytest.raises(SyntaxError) as caught:
            pyparse.parsed("def (")
        errors.append(caught.value)
    assert len(calls) == 1 and errors[0] is not errors[1]  # parsed once; a fresh exception each time
    assert (errors[0].msg, errors[0].lineno) == (errors[1].msg, errors[1].lineno) == ("invalid syntax", 1)
    assert pyparse.program("def (").tree is None
    with pytest.raises(IndentationError):
        pyparse.parsed("  x = 1\n y = 2\n")
    with pytest.raises((SyntaxError, ValueError)):  # a NUL byte: what ast.parse raises for it
        pyparse.parsed("x = 1\0")


def test_the_cache_keeps_the_recently_read_within_its_bounds(monkeypatch):
    monkeypatch.setattr(pyparse, "_KEEP", 3)
    texts = [f"x = {i}\n" for i in range(5)]
    kept = [pyparse.program(t) for t in texts[:3]]
    pyparse.program(texts[0])  # read again: the most recent now
    pyparse.program(texts[3])  # texts[1], the least recently read, goes
    assert list(pyparse._PROGRAMS) == [kept[2].digest, kept[0].digest, pyparse.source_digest(texts[3])]
    monkeypatch.setattr(pyparse, "_KEEP_CHARS", 20)
    big = "y = 1\n" * 10
    assert pyparse.program(big).tree is not None and list(pyparse._PROGRAMS) == [pyparse.source_digest(big)]


def test_a_rewrite_of_the_shared_tree_leaves_the_program_as_its_text_says():
    """Readers share the tree: a rewrite changes copies of the nodes it transforms, never the tree
    (a rewrite that changed it would hand every later reader a program its text is not). Every
    bundled baseline and Inductor seed, under every rewrite (the rewrites' own tests end with the
    same check: tests/conftest.py)."""
    import json

    from accelopt.policies.rewrites import REWRITES
    from accelopt.tools.inductor_seed import SeedRefused, seed_source
    from accelopt.tools.tunables import apply_config, config_of
    from tests.conftest import FIXTURES, TASKS, changed_parses

    sources = [path.read_text() for path in sorted(TASKS.glob("*/baseline.py"))]
    for path in sorted((FIXTURES / "inductor").glob("*.json")):
        try:
            sources.append(seed_source(json.loads(path.read_text())).source)
        except SeedRefused:
            pass  # a library call (cuBLAS), not a Triton kernel
    applied = set()
    for source in sources:
        shared = pyparse.program(source)
        before = ast.dump(shared.tree)
        applied |= {r.name for r in REWRITES if r.apply(source) is not None}
        apply_config(source, {name: value * 2 for name, value in config_of(source).items()})
        assert pyparse.program(source) is shared and ast.dump(shared.tree) == before
    assert len(applied) >= 9 and not changed_parses()
    # the check every test ends with (tests/conftest.py) sees a tree changed in place
    pyparse.parsed(sources[0]).body.pop()
    assert changed_parses() == [sources[0][:60]]
    pyparse.forget()
