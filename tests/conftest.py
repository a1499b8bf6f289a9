import ast
import os
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "evals" / "tasks"
FIXTURES = ROOT / "tests" / "fixtures"

# Nothing in the tests may reach a network or a GPU by accident.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("OPENAI_API_KEY", None)
os.environ.pop("ACCELOPT_API_KEY", None)
# rich wraps output at 80 columns: a long temporary path (longer under pytest-xdist's worker
# folders) would break across lines where tests look for it whole
os.environ.setdefault("COLUMNS", "250")


def descendants(pid: int) -> set[int]:
    """Every live process under pid (judges, their sandboxes and namespace shells)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def still_alive(pids: set[int], within_s: float) -> list[int]:
    """The processes of `pids` still running after waiting up to within_s seconds for them to go."""
    deadline = time.time() + within_s
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def has_nki_simulator() -> bool:
    from accelopt.tools.backends.nki import nki_api

    return nki_api()[0] is not None


def has_trainium() -> bool:
    from accelopt.tools.backends.nki import neuron_devices

    return bool(neuron_devices())


def pytest_collection_modifyitems(config, items):
    needs = {"gpu": (has_gpu, "needs a CUDA GPU"),
             "nki_sim": (has_nki_simulator, "needs the real NKI simulator (AWS Neuron SDK)"),
             "trainium": (has_trainium, "needs a Trainium NeuronCore")}
    for marker, (present, reason) in needs.items():
        if any(marker in item.keywords for item in items) and not present():
            for item in items:
                if marker in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def softmax_task(tmp_path) -> Path:
    """A private copy of the bundled softmax task."""
    dst = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return dst


def changed_parses() -> list[str]:
    """The kept parses (tools/pyparse.program) whose tree is no longer the text's: the start of each text."""
    from accelopt.tools import pyparse

    return [p.text[:60] for p in list(pyparse._PROGRAMS.values())
            if p.tree is not None and ast.dump(p.tree) != ast.dump(pyparse.parse(p.text))]


@pytest.fixture(autouse=True)
def shared_parses_stay_unchanged():
    """Every reader of a kernel's text shares its one parse (tools/pyparse.program): after each test,
    each tree it parsed is still the text's (a reader that changed one in place, a rewrite that did
    not copy the nodes it transforms, would hand every later reader a program the text is not)."""
    from accelopt.tools import pyparse

    pyparse.forget()
    yield
    changed = changed_parses()
    pyparse.forget()
    assert not changed, f"a shared parse was changed in place by a reader: {changed}"
