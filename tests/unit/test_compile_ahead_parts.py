"""The compile-ahead pass's parts that need no process of its own (tools/harness/compile_ahead.py):
the bubblewrap command with no GPU node, the cache copied out of the process's folder (regular
files only, group files pointing into the copy), the record's notes, the GPU's target read with
nvidia-smi, and the kill that leaves nothing behind."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

from accelopt.tools.harness import compile_ahead as ahead
from accelopt.tools.harness import confine
from tests.conftest import alive


def test_the_no_gpu_prefix_binds_no_device_node_and_not_the_hosts_shared_memory(monkeypatch):
    monkeypatch.setattr(confine, "bwrap_binary", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(confine, "gpu_devices", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    with_gpu = confine.bwrap_prefix("/tmp/x")
    assert with_gpu.count("--dev-bind") == 3 and "/dev/shm" in with_gpu  # the judge's template, as before
    without = confine.bwrap_prefix("/tmp/x", private_tmp=True, gpu=False, shm=False)
    assert "--dev-bind" not in without and not any("nvidia" in part for part in without)
    assert "/dev/shm" not in without
    assert {"--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent"} <= set(without)
    monkeypatch.setenv(confine.UNCONFINED_ENV, "1")
    assert confine.process_prefix("/tmp/x", gpu=False) == []  # unconfined, as the audit's process


def _cache(root):
    """A Triton cache as a compile leaves it: a key folder with a kernel's files and its group file
    naming them by absolute path, plus what a killed write leaves."""
    key = root / "ABCDEF0123"
    key.mkdir(parents=True)
    for name in ("k.cubin", "k.json", "k.ptx"):
        (key / name).write_bytes(b"x" * 10)
    (key / "__grp__k.json").write_text(json.dumps({"child_paths": {n: str(key / n) for n in ("k.cubin", "k.json",
                                                                                              "k.ptx")}}))
    (root / "tmp.pid_1_abc").mkdir()
    (root / "tmp.pid_1_abc" / "k.cubin").write_bytes(b"partial")
    return key


def test_the_cache_is_copied_out_as_regular_files_with_its_groups_pointing_into_the_copy(tmp_path):
    key = _cache(tmp_path / "left")
    secret = tmp_path / "secret.txt"
    secret.write_text("api key")
    os.symlink(secret, key / "stolen.cubin")  # a link the process planted: its target must not be copied
    (key / "stolen_dir").symlink_to(tmp_path)
    os.link(secret, key / "hard.cubin")  # a second name of a file from outside
    cubins, kernels = ahead.harvest(tmp_path / "left", tmp_path / "out")
    out = tmp_path / "out" / key.name
    assert (cubins, kernels) == (1, ("k",))
    assert sorted(p.name for p in out.iterdir()) == ["__grp__k.json", "k.cubin", "k.json", "k.ptx"]
    assert not (tmp_path / "out" / "tmp.pid_1_abc").exists()
    assert all(stat.S_ISREG(p.lstat().st_mode) for p in out.iterdir())
    group = json.loads((out / "__grp__k.json").read_text())["child_paths"]
    assert group == {n: str(out / n) for n in ("k.cubin", "k.json", "k.ptx")}


def test_a_group_naming_a_missing_or_foreign_file_is_dropped(tmp_path):
    key = _cache(tmp_path / "left")
    (key / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": "/etc/passwd"}}))
    ahead.harvest(tmp_path / "left", tmp_path / "out")
    assert not (tmp_path / "out" / key.name / "__grp__k.json").exists()  # Triton would read a miss: compiled again
    (key / "__grp__k.json").write_text("not json")
    ahead.harvest(tmp_path / "left", tmp_path / "out2")
    assert not (tmp_path / "out2" / key.name / "__grp__k.json").exists()


def test_a_file_already_in_the_destination_is_kept(tmp_path):
    key = _cache(tmp_path / "left")
    (tmp_path / "out" / key.name).mkdir(parents=True)
    (tmp_path / "out" / key.name / "k.cubin").write_bytes(b"mapped by a running process")
    ahead.harvest(tmp_path / "left", tmp_path / "out")
    assert (tmp_path / "out" / key.name / "k.cubin").read_bytes() == b"mapped by a running process"


def _record(events, **kw):
    args = {"timed_out": False, "code": 0, "log": "", "binaries": 2, "kernels": ("k",), "count": 2, "timeout_s": 60.0}
    args.update(kw)
    return ahead._record("/c", 1.0, 0.0, events, args["timed_out"], args["code"], args["log"], args["binaries"],
                         args["kernels"], args["count"], args["timeout_s"])


def test_the_record_says_why_a_pass_did_not_predict():
    ran = [{"event": "imported"}, {"event": "workload", "name": "a", "ran": True},
           {"event": "workload", "name": "b", "ran": True},
           {"event": "compiled", "kernel": "k", "hit": False}, {"event": "compiled", "kernel": "k", "hit": True},
           {"event": "autotuned", "kernel": "k", "configs": 3}, {"event": "utils", "built": False},
           {"event": "done", "completed": True, "stand_ins": {"torch.cuda.is_available": 2}}]
    good = _record(ran)
    assert good.predicted and good.note is None and good.workloads_run == 2 and good.configs == 3
    assert (good.compiled, good.cache_hits, good.utils) == (1, 1, False)
    assert good.stand_ins == {"torch.cuda.is_available": 2}
    failed = _record([{"event": "imported"}, {"event": "workload", "name": "a", "ran": True},
                      {"event": "workload", "name": "b", "ran": False, "stage": "call", "backing": "meta",
                       "error": "RuntimeError: item() on meta (kernel.py:9 in run)"},
                      {"event": "done", "completed": False}])
    assert not failed.predicted and failed.workloads_run == 1
    assert failed.note == ("workload b: the call failed (inputs on the meta device: too large for the CPU): "
                           "RuntimeError: item() on meta (kernel.py:9 in run)")
    late = _record([{"event": "imported"}, {"event": "workload", "name": "a", "ran": True}], timed_out=True)
    assert late.timed_out and not late.predicted and late.note == "killed at its 60 s timeout after 1 of 2 workloads"
    assert _record([], timed_out=True).note == "killed at its 60 s timeout while importing the kernel"
    broken = _record([{"event": "import_failed", "error": "SyntaxError: invalid syntax (kernel.py, line 3)"}])
    assert broken.note == "importing the kernel failed: SyntaxError: invalid syntax (kernel.py, line 3)"
    crashed = _record([{"event": "imported"}], code=-11, log="Fatal Python error: Segmentation fault\n")
    assert "exit code -11" in crashed.note and "Segmentation fault" in crashed.note


def test_the_gpus_target_is_read_with_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$3\" = \"-i\" ] && [ \"$4\" = \"7\" ] && exit 6\n"
                   "echo '9.0, NVIDIA H100 PCIe'\necho '9.0, NVIDIA H100 PCIe'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ahead, "_targets", {})
    target = ahead.gpu_target("0")
    assert target == ahead.GpuTarget((9, 0), "NVIDIA H100 PCIe")
    assert ahead.properties(target)["multiprocessor_count"] == 114  # not the SXM part's 132
    assert ahead.properties(ahead.GpuTarget((9, 0)))["multiprocessor_count"] == 132
    assert ahead.gpu_target("7") is None  # no such GPU
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert ahead.gpu_target("1") is None  # no nvidia-smi: no GPU
    assert ahead.gpu_target("0") == target  # read once


def test_the_kill_leaves_no_process_behind_not_even_one_in_a_session_of_its_own():
    token = f"accelopt-kill-test-{os.getpid()}-{time.monotonic_ns()}"
    code = ("import os, subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{token}'], start_new_session=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, token], start_new_session=True)
    deadline = time.monotonic() + 20
    while len(ahead._tree(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    tree = ahead._tree(proc.pid)
    assert len(tree) >= 2
    ahead.kill_tree(proc.pid)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in tree if alive(p)]
