"""The compile-ahead pass for real, on a machine with no GPU (tools/harness/compile_ahead.py): a
task's baseline leaves cubins for sm_90; a fresh process seeded from that cache as the judge seeds
a sandbox (triton_cache.copy) compiles nothing; an autotuned kernel has every configuration
compiled; the process sees no GPU node, writes nowhere but its folder, reaches no network and no
secret; a kernel that hangs is killed with all it started, and one that fails says where."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelopt.tools.harness import confine, triton_cache
from accelopt.tools.harness.compile_ahead import WORKER, GpuTarget, ahead_env, compile_ahead, properties
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, ROOT, TASKS

pytest.importorskip("triton.backends.nvidia")
CONFINED = pytest.mark.skipif(confine.refusal() is not None, reason=f"no confinement here: {confine.refusal()}")
H100 = GpuTarget((9, 0), "NVIDIA H100 80GB HBM3")


def _kernel(tmp_path: Path, source: str, name: str = "kernel.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def _metadata(cache: Path, kernel: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in cache.glob(f"*/{kernel}.json")]


def test_a_baseline_leaves_cubins_for_sm90_in_the_cache(tmp_path):
    task = load_task(TASKS / "softmax")
    record = compile_ahead(task, _kernel(tmp_path, task.baseline_source), None, tmp_path / "cache", H100,
                           timeout_s=120)
    assert record.predicted and record.note is None, record
    assert record.kernels == ("softmax_kernel",) and record.workloads_run == record.workloads == 3
    cubins = sorted((tmp_path / "cache").glob("*/softmax_kernel.cubin"))
    assert len(cubins) == record.binaries == record.compiled >= 1
    for cubin in cubins:
        assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert {(m["target"]["arch"], m["target"]["warp_size"], m["target"]["backend"])
            for m in _metadata(tmp_path / "cache", "softmax_kernel")} == {(90, 32, "cuda")}
    assert all(".target sm_90a" in p.read_text() for p in (tmp_path / "cache").glob("*/softmax_kernel.ptx"))
    assert not list((tmp_path / "cache").rglob("tmp.pid_*"))


def _worker(cache: Path, home: Path, task, source: Path) -> list[dict]:
    """The worker in a fresh process of its own (unconfined), its Triton cache `cache`: its events."""
    home.mkdir()
    request = {"home": str(home), "readable": [task.root], "confine": False, "source_path": str(source),
               "entry_point": task.spec.entry_point, "reference_path": str(Path(task.root) / "reference.py"),
               "dtype": task.spec.dtype, "seed": 0, "threads": 2, "max_input_bytes": 2 << 30, "utils": False,
               "properties": properties(H100),
               "workloads": [{"name": w.name, "params": w.params} for w in task.spec.workloads]}
    (home / "request.json").write_text(json.dumps(request))
    read, write = os.pipe()
    env = {**ahead_env(home), "TRITON_CACHE_DIR": str(cache)}
    proc = subprocess.Popen([sys.executable, str(WORKER), str(home / "request.json"), str(write)], env=env,
                            pass_fds=[write], cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write)
    with os.fdopen(read) as f:
        lines = f.read().splitlines()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return [json.loads(line) for line in lines]


def test_a_fresh_process_seeded_as_the_judge_seeds_a_sandbox_compiles_nothing(tmp_path):
    """The CPU's stand-in for the GPU's cache hit: the keys the ahead pass wrote are the keys a
    fresh process computes for the same launches, and the judge's copy (group files repointed)
    keeps them found."""
    task = load_task(TASKS / "softmax")
    source = _kernel(tmp_path, task.baseline_source)
    record = compile_ahead(task, source, None, tmp_path / "ahead", H100, timeout_s=120)
    assert record.predicted and record.compiled == 3
    assert triton_cache.copy(str(tmp_path / "ahead"), str(tmp_path / "sandbox-cache"))  # Sandbox.seed_cache
    events = _worker(tmp_path / "sandbox-cache", tmp_path / "fresh", task, source)
    compiles = [e for e in events if e["event"] == "compiled"]
    assert len(compiles) == 3 and all(e["hit"] for e in compiles), compiles
    assert [e["completed"] for e in events if e["event"] == "done"] == [True]


def test_an_autotuned_kernel_has_every_configuration_compiled(tmp_path):
    task = load_task(TASKS / "rmsnorm")
    source = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text()
    record = compile_ahead(task, _kernel(tmp_path, source), None, tmp_path / "cache", H100, timeout_s=120)
    assert record.predicted, record
    keys = len({w.params["H"] for w in task.spec.workloads})  # the tuning key: the hidden size
    assert record.configs == 3 * keys
    shapes = {(m["num_warps"], m["num_stages"]) for m in _metadata(tmp_path / "cache", "rmsnorm_kernel")}
    assert shapes == {(2, 3), (4, 2), (8, 3)}  # the fixture's three configurations, none left out
    assert record.binaries == 3  # hidden sizes 4096 and 8192 specialize alike (both % 16 == 0)
    assert record.failed_configs == 0  # the second key's configurations were found compiled, not failed


def test_a_configuration_that_does_not_compile_is_counted_and_the_rest_are_compiled(tmp_path):
    """As on the GPU, where the autotuner times a configuration that fails to compile as infinitely slow."""
    task = load_task(TASKS / "rmsnorm")
    source = (FIXTURES / "autotuned" / "rmsnorm_autotuned.py").read_text().replace(
        "    row = tl.program_id(0)\n", "    tl.static_assert(BLOCK <= 128)\n    row = tl.program_id(0)\n", 1)
    record = compile_ahead(task, _kernel(tmp_path, source), None, tmp_path / "cache", H100, timeout_s=120)
    keys = len({w.params["H"] for w in task.spec.workloads})
    assert record.predicted and record.configs == 3 * keys, record
    assert record.failed_configs == keys  # BLOCK 256, once per tuning key
    assert record.binaries == 2


def test_a_call_that_fails_keeps_what_it_compiled_and_says_where(tmp_path):
    task = load_task(TASKS / "softmax")
    source = task.baseline_source.replace("    return out", "    raise NotImplementedError('no epilogue yet')")
    line = source.splitlines().index("    raise NotImplementedError('no epilogue yet')") + 1
    record = compile_ahead(task, _kernel(tmp_path, source), None, tmp_path / "cache", H100, timeout_s=120)
    assert not record.predicted and record.workloads_run == 0
    assert record.binaries == 3  # each workload's launch compiled before the raise
    assert record.note == (f"workload {task.spec.workloads[0].name}: the call failed: NotImplementedError: "
                           f"no epilogue yet (kernel.py:{line} in run)")


def test_a_kernel_that_fails_at_import_gets_a_clear_note(tmp_path):
    task = load_task(TASKS / "softmax")
    record = compile_ahead(task, _kernel(tmp_path, "import torch\n\nraise ImportError('needs flash_attn')\n"), None,
                           tmp_path / "cache", H100, timeout_s=60)
    assert not record.predicted and record.binaries == 0
    assert record.note == "importing the kernel failed: ImportError: needs flash_attn (kernel.py:3 in <module>)"
    record = compile_ahead(task, _kernel(tmp_path, "def run(x):\n    return x +\n"), None, tmp_path / "c2", H100,
                           timeout_s=60)
    assert record.note.startswith("importing the kernel failed: SyntaxError: invalid syntax")


def test_a_wrapper_written_for_cuda_is_predicted_on_the_cpu(tmp_path):
    """What FlashInfer-Bench solutions do: refuse without CUDA, move inputs with .cuda(), allocate
    with device="cuda", read a value of an input on the host, ask the device's properties."""
    task = load_task(TASKS / "softmax")
    source = task.baseline_source.replace("def run(x):\n", (
        "def run(x):\n"
        "    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8:\n"
        "        raise RuntimeError('CUDA is required')\n"
        "    x = x if x.is_cuda else x.cuda()\n"
        "    assert x.device.type == 'cuda' and torch.cuda.get_device_properties(0).multi_processor_count == 132\n"
        "    scratch = torch.empty(16, device='cuda').to(torch.device('cuda', 0))\n"
        "    assert float(x[0, 0].abs().cpu().item()) >= 0\n"
        "    torch.cuda.synchronize()\n"))
    record = compile_ahead(task, _kernel(tmp_path, source), None, tmp_path / "cache", H100, timeout_s=120)
    assert record.predicted, record.note
    assert {"torch.cuda.is_available", "torch.cuda.get_device_capability", "Tensor.is_cuda", "Tensor.device",
            'device="cuda"', 'Tensor.to("cuda")', "Tensor.cpu", "torch.cuda.synchronize",
            "torch.cuda.get_device_properties"} <= set(record.stand_ins), record.stand_ins


def test_inputs_over_the_bound_run_on_the_meta_device(tmp_path):
    """No memory and no values: a wrapper that reads none is predicted, one that reads a value
    says it could not."""
    task = load_task(TASKS / "softmax")
    source = _kernel(tmp_path, task.baseline_source)
    record = compile_ahead(task, source, None, tmp_path / "cache", H100, timeout_s=120, max_input_bytes=1)
    assert record.predicted and record.binaries == 3, record.note
    reads = task.baseline_source.replace("    n_rows, n_cols = x.shape\n",
                                         "    n_rows, n_cols = x.shape\n    assert x.max().item() < 1e9\n")
    record = compile_ahead(task, _kernel(tmp_path, reads, "reads.py"), None, tmp_path / "c2", H100, timeout_s=120,
                           max_input_bytes=1)
    assert not record.predicted and "(inputs on the meta device: too large for the CPU)" in record.note


PROBE = '''
import json, os, socket

FOUND = {{"escaped": []}}


def _try(what, action):
    try:
        action()
        FOUND["escaped"].append(what)
    except OSError:
        pass


def _write(path):
    with open(path, "w") as f:
        f.write("x")


with open(os.path.join(os.getcwd(), "mine.txt"), "w") as _f:  # its own folder: allowed
    _f.write("x")
for _path in {nodes!r}:
    if os.path.exists(_path):
        FOUND["escaped"].append("sees " + _path)
for _path in {targets!r}:
    _try("write " + _path, lambda p=_path: _write(p))
_try("read secret", lambda: open({secret!r}).read())
_try("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
FOUND["cvd"] = os.environ.get("CUDA_VISIBLE_DEVICES")
FOUND["secret_env"] = "ACCELOPT_PROBE_SECRET" in os.environ
raise RuntimeError("PROBE " + json.dumps(FOUND))
'''


def _probe(tmp_path: Path, port: int) -> tuple[dict, list[Path]]:
    token = os.urandom(4).hex()
    (tmp_path / "secret.txt").write_text("api key")
    targets = [tmp_path / f"probe_{token}", ROOT / f"probe_{token}", Path("/tmp") / f"probe_{token}",
               Path("/dev/shm") / f"probe_{token}", Path(sys.prefix) / f"probe_{token}"]
    nodes = ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/fuse"]
    source = PROBE.format(nodes=nodes, targets=[str(t) for t in targets], secret=str(tmp_path / "secret.txt"),
                          port=port)
    task = load_task(TASKS / "softmax")
    record = compile_ahead(task, _kernel(tmp_path, source, "probe.py"), None, tmp_path / "cache", H100, timeout_s=60)
    match = re.search(r"PROBE (\{.*\}) \(kernel\.py", record.note or "")
    assert match, record.note
    return json.loads(match.group(1)), targets


@CONFINED
def test_the_compile_process_has_no_gpu_and_cannot_write_or_look_outside_its_folder(tmp_path, monkeypatch):
    # /dev/fuse stands in for a GPU's node on this machine: the judge's prefix would bind it in
    monkeypatch.setattr(confine, "gpu_devices", lambda: ["/dev/fuse"])
    monkeypatch.setenv("ACCELOPT_PROBE_SECRET", "sk-should-not-travel")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.1)
        found, targets = _probe(tmp_path, server.getsockname()[1])
        with pytest.raises(OSError):
            server.accept()  # nothing reached it
    assert found == {"escaped": [], "cvd": "", "secret_env": False}
    assert not [t for t in targets if t.exists()]


@CONFINED
def test_the_probe_can_fail(tmp_path, monkeypatch):
    """The same stand-in node is visible under the judge's prefix, and the probe catches escapes
    when run unconfined: the test above can fail."""
    monkeypatch.setattr(confine, "gpu_devices", lambda: ["/dev/fuse"])
    seen = subprocess.run([*confine.bwrap_prefix(str(tmp_path)), "test", "-e", "/dev/fuse"], timeout=30)
    assert seen.returncode == 0
    monkeypatch.setenv(confine.UNCONFINED_ENV, "1")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        found, targets = _probe(tmp_path, server.getsockname()[1])
    try:
        assert "read secret" in found["escaped"] and "tcp" in found["escaped"] and "sees /dev/fuse" in found["escaped"]
        assert found["cvd"] == "" and found["secret_env"] is False  # the environment is scrubbed either way
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


HANG = '''
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{token}"], start_new_session=True)
time.sleep(600)
'''


def _running(token: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("confined", [pytest.param(True, marks=CONFINED), False])
def test_a_kernel_that_hangs_at_import_is_killed_at_the_timeout_with_nothing_left(tmp_path, monkeypatch, confined):
    if not confined:
        monkeypatch.setenv(confine.UNCONFINED_ENV, "1")
    token = f"accelopt-hang-{os.urandom(6).hex()}"
    task = load_task(TASKS / "softmax")
    started = time.monotonic()
    record = compile_ahead(task, _kernel(tmp_path, HANG.format(token=token)), None, tmp_path / "cache", H100,
                           timeout_s=6)
    assert time.monotonic() - started < 40
    assert record.timed_out and not record.predicted
    assert record.note == "killed at its 6 s timeout while importing the kernel"
    deadline = time.monotonic() + 10
    while _running(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(token)
    assert not [p for p in Path("/tmp").glob("accelopt-ahead-*/kernel.py") if token in p.read_text()]  # removed
