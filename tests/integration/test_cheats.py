"""The adversarial corpus (tests/fixtures/cheats): every cheat gets the verdict its header names.

Each fixture targets the bundled softmax task and starts with header lines:
    # expect: STATUS          the status the harness must give it
    # reason: SUBSTRING       optional: a substring of the harness's error text (case-insensitive)
    # device: gpu             optional: only acts, or is only caught, on a real GPU
followed by a docstring naming the exploit class and where it comes from in the public record.
CPU fixtures run on the Triton interpreter; `# device: gpu` ones run with device="cuda".

KNOWN_GAPS lists cheats the harness does not catch yet, as strict xfails: each says what evidence
is missing, and an XPASS (the gap closed) fails until its entry is removed.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES

pytestmark = pytest.mark.slow

CHEATS_DIR = FIXTURES / "cheats"
STATUSES = {"verified", "cheat_suspected", "wrong_output", "nan", "input_mutated", "shape_mismatch",
            "dtype_mismatch", "runtime_error", "crashed", "timeout"}
REASONS = {"launches stubbed", "outside the Triton launches", "thread", "replaced", "not after it",
           "plain torch.Tensor", "differ between identical calls", "network", "process", "another process",
           "not when timed", "fresh values", "stress draw",
           "denied", "not permitted"}  # the confinement's refusals (Landlock: EACCES; its signal scope: EPERM)
# Short runs: two seeds and one timing round show every cheat here.
RUN = {"seeds": 2, "rounds": 1}
# Where a cheat could freeze the judge (SIGSTOP) if isolation were missing, do not wait the default 300 s.
TIMEOUTS = {"kill_parent": 60.0}
# Cheats whose first failing check depends on the allocator, not on the harness: an output cache
# keyed by id(x) serves a stale output wherever CPython reuses an input's id, in the checks
# (wrong_output, seen on an H100 at 84d6f82) or only in the timed calls (its header's verdict).
ALSO_REJECTED_AS = {"cache_id": {"wrong_output"}}
PICKLE_MARKER = Path("/tmp/accelopt-pickle-rce")  # what pickle_rce_reply's payload would create in the judge

# Cheats that replace torch functions, Tensor methods, Triton's launcher or the harness's own code:
# evaluated one after another in a single judge, they must leave later candidates unaffected.
PATCHING = ("patch_allclose", "patch_tensor_double", "patch_torch_softmax", "patch_torch_empty", "patch_jit_run",
            "patch_jit_run_restore", "patch_perf_counter", "patch_do_bench", "setattr_assembled_timer",
            "patch_timer", "patch_timer_dynamic", "frame_patch_compare", "sandbox_hijack", "patch_profiler_hide")

# mode_sniff (torch only where no profiler runs) left this list when the trace began recording every
# thread: torch's `_profiler_enabled()`, its probe, then reads False. Another probe may still tell.
KNOWN_GAPS: dict[str, str] = {}


def parse_header(path: Path) -> dict:
    """The leading `# key: value` lines and whether a docstring follows them."""
    header = {"expect": None, "reason": None, "device": None}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines) and (m := re.match(r"# (expect|reason|device): (.+)$", lines[i])):
        header[m.group(1)] = m.group(2).strip()
        i += 1
    header["keys"] = [re.match(r"# (\w+):", line).group(1) for line in lines[:i]]
    header["docstring"] = i < len(lines) and lines[i].startswith('"""')
    return header


CHEATS = sorted(CHEATS_DIR.glob("*.py"))
HEADERS = {p.stem: parse_header(p) for p in CHEATS}


# Cheats that reach for other processes or the network are stopped by the sandbox's confinement
# (tools/harness/confine.py); where it cannot be set up, runs are refused, and these are skipped.
NEEDS_NAMESPACE = {"kill_parent", "proc_parent_read", "socket_fetch"}


def _confined() -> bool:
    from accelopt.tools.harness import confine

    return confine.refusal() is None and not confine.unconfined()


def _params():
    for path in CHEATS:
        marks = [pytest.mark.gpu] if HEADERS[path.stem]["device"] == "gpu" else []
        if path.stem in NEEDS_NAMESPACE and not _confined():
            marks.append(pytest.mark.skip(reason="this OS gives the sandbox no namespace of its own for this"))
        if path.stem in KNOWN_GAPS:
            marks.append(pytest.mark.xfail(reason=KNOWN_GAPS[path.stem], strict=True))
        yield pytest.param(path, id=path.stem, marks=marks)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from tests.conftest import TASKS

    dst = tmp_path_factory.mktemp("cheats") / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return load_task(dst)


def test_corpus_headers():
    assert len(CHEATS) >= 60
    for name, header in HEADERS.items():
        assert header["expect"] in STATUSES, name
        assert header["keys"] == [k for k in ("expect", "reason", "device") if header[k]], f"{name}: header order"
        assert header["reason"] is None or header["reason"] in REASONS, name
        assert header["device"] in (None, "gpu"), name
        assert header["docstring"], f"{name}: a docstring must follow the header"
    assert set(PATCHING) | set(KNOWN_GAPS) <= set(HEADERS)


@pytest.mark.parametrize("path", list(_params()))
def test_cheat_gets_its_verdict(task, path):
    header = HEADERS[path.stem]
    device = "cuda" if header["device"] == "gpu" else "cpu"
    if path.stem == "pickle_rce_reply":
        shutil.rmtree(PICKLE_MARKER, ignore_errors=True)
    result = evaluate(task, path.read_text(), device=device, timeout_s=TIMEOUTS.get(path.stem, 300.0), **RUN)
    if result.status in ALSO_REJECTED_AS.get(path.stem, ()):
        return
    assert result.status == header["expect"], f"{path.stem}: {result.status}: {result.error}"
    if header["reason"]:
        assert header["reason"].lower() in (result.error or "").lower(), result.error
    if path.stem == "pickle_rce_reply":
        assert not PICKLE_MARKER.exists(), "the forged reply's pickle ran code in the judge"


def test_patching_cheats_do_not_contaminate_later_candidates(task):
    """The patching cheats, then an honest and a wrong kernel, all through one judge process: whatever
    the cheats patched must not reach the verdicts of the candidates after them."""
    from accelopt.tools.harness.pool import WorkerPool
    from tests.scripted import BASELINE, WRONG

    pool = WorkerPool("cpu", 1)
    try:
        for name in PATCHING:
            cheat = evaluate(task, (CHEATS_DIR / f"{name}.py").read_text(), device="cpu", pool=pool, **RUN)
            assert cheat.status != "verified" or name in KNOWN_GAPS, f"{name} was verified"
        honest = evaluate(task, BASELINE, device="cpu", pool=pool, **RUN)
        assert honest.status == "verified", honest.error
        wrong = evaluate(task, WRONG, device="cpu", pool=pool, **RUN)
        assert wrong.status == "wrong_output", wrong.error
    finally:
        pool.close()


def _named(comm: str) -> list[int]:
    """Live processes on this host (sandboxes' PID namespaces included) whose name is `comm`: a
    zombie (killed, its parent yet to reap it) runs nothing."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm and \
                    Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("unconfined", [False, True], ids=["confined", "unconfined"])
def test_nothing_outlives_its_evaluation(task, monkeypatch, unconfined):
    """A process forked at import and detached (setsid, double fork) is gone once its evaluation
    ends, in a warm judge that goes on to the next candidate, confined or not."""
    from accelopt.tools.harness.pool import WorkerPool
    from tests.scripted import BASELINE

    if unconfined:
        monkeypatch.setenv("ACCELOPT_UNCONFINED", "1")
    elif not _confined():
        pytest.skip("this OS gives the sandbox no namespace of its own")
    comm = f"accsl-{secrets.token_hex(4)}"
    source = (CHEATS_DIR / "detached_sleeper.py").read_text().replace("accsl-00000000", comm)
    pool = WorkerPool("cpu", 1)
    try:
        sleeper = evaluate(task, source, device="cpu", pool=pool, **RUN)
        assert sleeper.status == "cheat_suspected", sleeper.error
        assert not _named(comm), "the sleeper outlived its evaluation"
        honest = evaluate(task, BASELINE, device="cpu", pool=pool, **RUN)
        assert honest.status == "verified", honest.error
        assert not _named(comm), "the sleeper outlived the next evaluation"
    finally:
        pool.close()
