"""The device lease (tools/harness/device_lease.py): one process at a time on a GPU, across
processes. Real processes contend for an arbitrary key in a temporary lock folder; no GPU needed."""

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from accelopt.tools.harness import device_lease
from accelopt.tools.harness.device_lease import DeviceBusy, holder, lease
from tests.conftest import ROOT

HOLDER = """
import sys
from accelopt.tools.harness import device_lease
key, folder = sys.argv[1], sys.argv[2]
with device_lease.lease(key, what="the test's holder", lock_dir=folder):
    print("held", flush=True)
    sys.stdin.readline()
    print("releasing", flush=True)
# at once again, as a run evaluating back to back does
with device_lease.lease(key, what="the test's holder", lock_dir=folder, on_wait=lambda line: print("waiting", flush=True)):
    print("again", flush=True)
    sys.stdin.readline()
"""


class Holder:
    """A process holding `key` until told to let go (a line on its stdin)."""

    def __init__(self, key: str, folder):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, key, str(folder)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.line() == "held"

    def line(self) -> str:
        return (self.proc.stdout.readline() if self.proc.stdout else "").strip()

    def tell(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def holders():
    started: list[Holder] = []
    yield lambda key, folder: started.append(Holder(key, folder)) or started[-1]
    for h in started:
        h.end()


def test_a_second_process_waits_says_for_whom_and_gets_the_gpu_when_the_first_lets_go(tmp_path, holders):
    first = holders("gpu-a", tmp_path)
    said: list[str] = []

    def on_wait(line: str) -> None:
        said.append(line)
        first.tell()  # let go only once this process is seen waiting

    with lease("gpu-a", label="GPU 0", lock_dir=tmp_path, on_wait=on_wait, timeout_s=30):
        assert first.line() == "releasing"  # it had the GPU until then
        assert holder("gpu-a", tmp_path).pid == os.getpid()
        assert first.line() == "waiting"  # its next try waits behind this one: not taken back at once
    assert said == [f"waiting for GPU 0, held by pid {first.proc.pid} (the test's holder)"]
    rest = [first.line()]
    while rest[-1] == "waiting":  # a line per holder it waited for
        rest.append(first.line())
    assert rest[-1] == "again"  # and it got the GPU once this one let go


def test_a_holder_killed_with_sigkill_frees_the_gpu_at_once(tmp_path, holders):
    first = holders("gpu-a", tmp_path)
    assert holder("gpu-a", tmp_path).pid == first.proc.pid
    with pytest.raises(DeviceBusy):
        with lease("gpu-a", lock_dir=tmp_path, timeout_s=0.2, on_wait=lambda line: None):
            pass
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    began = time.monotonic()
    with lease("gpu-a", lock_dir=tmp_path, timeout_s=5, on_wait=lambda line: pytest.fail(line)):
        assert time.monotonic() - began < 1.0
        assert holder("gpu-a", tmp_path).pid == os.getpid()  # the dead holder's note is overwritten
    assert holder("gpu-a", tmp_path) is None  # emptied on release


def test_waiting_past_the_limit_is_an_error_naming_the_holder(tmp_path, holders, monkeypatch):
    first = holders("gpu-a", tmp_path)
    monkeypatch.setenv("ACCELOPT_LOCK_WAIT_S", "0.3")  # the setting, when the caller gives no limit
    said: list[str] = []
    began = time.monotonic()
    with pytest.raises(DeviceBusy) as caught:
        with lease("gpu-a", label="GPU 3", lock_dir=tmp_path, on_wait=said.append):
            pytest.fail("taken while another process held it")
    assert 0.3 <= time.monotonic() - began < 5
    message = str(caught.value)
    assert f"GPU 3 was still held by pid {first.proc.pid} (the test's holder) after 0.3 s" in message
    assert "ACCELOPT_LOCK_WAIT_S" in message and str(tmp_path) in message
    assert len(said) == 1


def test_different_gpus_do_not_exclude_each_other(tmp_path, holders):
    holders("gpu-a", tmp_path)
    with lease("gpu-b", lock_dir=tmp_path, timeout_s=1, on_wait=lambda line: pytest.fail(line)):
        assert holder("gpu-b", tmp_path).pid == os.getpid()


def test_threads_exclude_each_other_and_one_thread_may_nest(tmp_path):
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lease("gpu-a", lock_dir=tmp_path):
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(DeviceBusy):  # another thread of this process holds it
            with lease("gpu-a", lock_dir=tmp_path, timeout_s=0.2, on_wait=lambda line: None):
                pass
    finally:
        done.set()
        thread.join()
    with lease("gpu-a", lock_dir=tmp_path, timeout_s=1):
        with lease("gpu-a", lock_dir=tmp_path, timeout_s=0.2, on_wait=lambda line: pytest.fail(line)):
            pass  # the outer lease covers it: no deadlock on itself
        assert holder("gpu-a", tmp_path).pid == os.getpid()  # the nested one's end left the outer held
    assert holder("gpu-a", tmp_path) is None


def test_the_folder_and_lock_files_are_shared_with_every_user(tmp_path):
    folder = tmp_path / "locks"
    old = os.umask(0o077)
    try:
        with lease("gpu-a", lock_dir=folder, timeout_s=1):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["gpu-gpu-a.lock", "gpu-gpu-a.queue"]
    assert all(stat.S_IMODE((folder / f).stat().st_mode) == 0o666 for f in files)


def test_a_lock_folder_that_cannot_be_made_says_which_setting_to_change(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(device_lease.DeviceLeaseError, match="ACCELOPT_LOCK_DIR"):
        with lease("gpu-a", lock_dir=tmp_path / "file" / "locks", timeout_s=1):
            pass


def test_the_key_is_the_physical_gpu(monkeypatch):
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ((0, "GPU-aaaa-1111"), (1, "GPU-bbbb-2222")))
    assert device_lease.gpu_key("1") == ("GPU-bbbb-2222", "GPU 1")
    assert device_lease.gpu_key(None) == ("GPU-aaaa-1111", "GPU 0")
    assert device_lease.gpu_key("GPU-bbbb") == ("GPU-bbbb-2222", "GPU GPU-bbbb")  # a UUID prefix, as CUDA takes
    assert device_lease.gpu_key("MIG-cccc")[0] == "MIG-cccc"
    assert device_lease.gpu_key("7")[0] == "index-7"  # not in the driver's list
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ())
    assert device_lease.gpu_key("1")[0] == "index-1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert device_lease.default_gpu() == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device_lease.default_gpu() == "0"


# ---------------------------------------------------------------- where it is held

def _busy_elsewhere(key: str, folder) -> bool:
    """Whether another thread (another open file description) finds `key` held."""
    found: list[bool] = []

    def probe() -> None:
        try:
            with lease(key, lock_dir=folder, timeout_s=0.1, on_wait=lambda line: None):
                found.append(False)
        except DeviceBusy:
            found.append(True)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return found[0]


def test_the_pool_holds_its_judges_gpu_for_an_evaluation_on_cuda_only(tmp_path, monkeypatch):
    from accelopt.tools.harness.pool import WorkerPool

    monkeypatch.setenv("ACCELOPT_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ((0, "GPU-aaaa"), (1, "GPU-bbbb")))
    pool = WorkerPool("cuda", 2, ["0", "1"])  # no judge starts before a request
    try:
        with pool.lease() as worker:
            key = device_lease.gpu_key(worker.gpu)[0]
            other = "GPU-bbbb" if key == "GPU-aaaa" else "GPU-aaaa"
            assert _busy_elsewhere(key, tmp_path) and not _busy_elsewhere(other, tmp_path)
            assert "evaluation" in holder(key, tmp_path).what
        assert not _busy_elsewhere(key, tmp_path)
    finally:
        pool.close()
    quiet = tmp_path / "cpu"
    monkeypatch.setenv("ACCELOPT_LOCK_DIR", str(quiet))
    interpreter = WorkerPool("cpu", 1)
    try:
        with interpreter.lease():
            assert not quiet.exists()  # the interpreter takes no lease: its times are not performance
    finally:
        interpreter.close()


def test_the_planners_profile_holds_the_gpu_it_runs_on(tmp_path, monkeypatch):
    from accelopt.tools.harness import kernel_profile
    from accelopt.tools.task import load_task
    from tests.conftest import TASKS

    monkeypatch.setenv("ACCELOPT_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ())
    seen = {}

    class Profiling:
        def __init__(self, task, source, workloads, *, metrics=None, gpu=None):
            seen["gpu"], self.workloads = gpu, workloads

        def collect(self, timeout_s, triton_cache=None):
            seen["busy"] = _busy_elsewhere("index-2", tmp_path)
            return kernel_profile.ProfileRun("ncu", {self.workloads[0]: [{"name": "k", "time_us": 1.0}]})

    monkeypatch.setattr(kernel_profile, "Profiling", Profiling)
    task = load_task(TASKS / "softmax")
    assert kernel_profile.profile_kernel(task, task.baseline_source) is not None
    assert seen == {"gpu": "2", "busy": True}
    assert not _busy_elsewhere("index-2", tmp_path)


def test_the_inductor_capture_holds_the_gpu(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from accelopt.tools import inductor_capture

    monkeypatch.setenv("ACCELOPT_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = {}

    def run(cmd, **kwargs):
        seen["busy"] = _busy_elsewhere("index-0", tmp_path)
        with open(cmd[4], "w") as out:  # python -m MODULE TASK OUT
            out.write('{"workloads": []}')
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    assert inductor_capture.capture_in_subprocess(str(tmp_path)) == {"workloads": []}
    assert seen == {"busy": True}


def test_an_evaluation_that_waited_past_the_limit_is_lost_not_the_kernels_fault(tmp_path, monkeypatch):
    from accelopt.tools.harness.pool import WorkerPool
    from accelopt.tools.harness.runner import evaluate
    from accelopt.tools.task import load_task
    from tests.conftest import TASKS

    monkeypatch.setenv("ACCELOPT_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("ACCELOPT_LOCK_WAIT_S", "0.2")
    monkeypatch.setattr(device_lease, "driver_gpus", lambda: ())
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lease("index-0", lock_dir=tmp_path, what="another run"):
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    pool = WorkerPool("cuda", 1, ["0"], on_wait=lambda line: None)
    try:
        assert inside.wait(10)
        task = load_task(TASKS / "softmax")
        result = evaluate(task, task.baseline_source, device="cuda", pool=pool)
        assert result.status == "infra_error" and "GPU 0 was still held by pid" in (result.error or "")
        assert len(pool.free) == 1  # the judge went back to the pool
    finally:
        done.set()
        thread.join()
        pool.close()


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_a_wait_that_cannot_be_used_names_the_variable(monkeypatch, value):
    from accelopt.tools.settings import ConfigError, lock_wait_s

    monkeypatch.setenv("ACCELOPT_LOCK_WAIT_S", value)
    with pytest.raises(ConfigError, match="ACCELOPT_LOCK_WAIT_S"):
        lock_wait_s()
