"""The runner's compile-ahead (runner._compiling_ahead, compile_ahead.AheadPass), on a machine with
no GPU: a candidate that waits for a busy judge has its kernels compiled meanwhile and its sandbox
is seeded from them; one whose judge is free at once gets no pass; a pass still running when the
judge comes is cancelled and leaves nothing behind."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from accelopt.tools.harness import compile_ahead, confine, runner
from accelopt.tools.task import load_task
from tests.conftest import TASKS, still_alive

pytest.importorskip("triton.backends.nvidia")
pytestmark = pytest.mark.skipif(confine.refusal() is not None, reason=f"no confinement here: {confine.refusal()}")
H100 = compile_ahead.GpuTarget((9, 0), "NVIDIA H100 80GB HBM3")


class Pool:
    def __init__(self, free: bool):
        self.free = free

    def has_free_judge(self) -> bool:
        return self.free


@pytest.fixture
def on_an_h100(monkeypatch):
    monkeypatch.setattr(compile_ahead, "gpu_target", lambda gpu=None: H100)


def test_a_candidate_waiting_for_a_busy_judge_has_its_kernels_compiled_meanwhile(on_an_h100):
    task = load_task(TASKS / "rmsnorm")
    with runner._compiling_ahead(task, task.baseline_source, "cuda", False, Pool(free=False), 120.0) as ahead:
        assert ahead is not None
        assert ahead.wait(until=lambda: False)  # no judge came free: it waited for the pass to end
        done = ahead.take()
        assert done is not None and done.binaries >= 1 and done.predicted, done
        assert list((ahead.home / compile_ahead.CACHE).glob("*/*.cubin"))
        home = ahead.home
    assert not home.exists()


def test_no_pass_where_a_judge_is_free_or_it_is_turned_off_or_on_the_interpreter(on_an_h100, monkeypatch):
    task = load_task(TASKS / "rmsnorm")
    for device, pool in (("cuda", Pool(free=True)), ("cpu", Pool(free=False))):
        with runner._compiling_ahead(task, task.baseline_source, device, False, pool, 120.0) as ahead:
            assert ahead is None
    with runner._compiling_ahead(task, task.baseline_source, "cuda", True, Pool(free=False), 120.0) as ahead:
        assert ahead is None  # the task's own reference, timed as a kernel: nothing of a candidate's
    monkeypatch.setenv("ACCELOPT_COMPILE_AHEAD", "0")
    with runner._compiling_ahead(task, task.baseline_source, "cuda", False, Pool(free=False), 120.0) as ahead:
        assert ahead is None


def test_a_pass_still_running_when_the_judge_comes_is_cancelled_and_leaves_nothing(on_an_h100, tmp_path,
                                                                                   monkeypatch):
    task = load_task(TASKS / "rmsnorm")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its folders apart from other tests' passes
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob(compile_ahead.HOME_PREFIX + "*"))
    began = time.monotonic()
    with runner._compiling_ahead(task, task.baseline_source, "cuda", False, Pool(free=False), 120.0) as ahead:
        assert ahead is not None
        deadline = time.monotonic() + 10
        while not (workers := _workers(set(tmp.glob(compile_ahead.HOME_PREFIX + "*")) - before - {ahead.home})):
            assert time.monotonic() < deadline, "the pass's worker never started"
            time.sleep(0.05)
        began_waiting = time.monotonic()
        assert not ahead.wait(until=lambda: True) and time.monotonic() - began_waiting < 1  # a judge is free
        assert ahead.take() is None and ahead.cancel.is_set()  # its process is starting: far from done
    assert ahead.result is not None and "cancelled" in (ahead.result.note or "") and not ahead.result.predicted
    assert time.monotonic() - began < 20 and not ahead.thread.is_alive()
    assert not (set(tmp.glob(compile_ahead.HOME_PREFIX + "*")) - before)
    assert not still_alive(set(workers), within_s=10)  # SIGKILLed, they may take a moment to tear down


def _workers(homes: set[Path]) -> list[int]:
    """The processes whose command line names one of `homes` (a pass's worker and its bubblewrap)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        if any(str(home).encode() in text for home in homes):
            found.append(int(cmdline.parent.name))
    return found
