"""The judge pool: homes of a driver killed with SIGKILL (its pool never closed) are swept by the
next pool, never those of a driver still running; judges are handed out warm ones first."""

import os
import shutil
import subprocess
import sys

from accelopt.tools.harness.pool import Worker, WorkerPool, sweep_orphaned_folders


def test_homes_of_dead_pools_are_swept_and_live_ones_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"accelopt-judge-cpu0-p{gone.pid}-abc"
    dead.mkdir()
    (dead / "stderr.log").write_text("from a killed run")
    live = tmp_path / f"accelopt-judge-cuda1-p{os.getpid()}-def"
    live.mkdir()
    unknown = tmp_path / "accelopt-judge-cpu0-xyz"  # no owner in its name (an older accelopt): left alone
    unknown.mkdir()
    dead_source = tmp_path / f"accelopt-src-p{gone.pid}-k2j"  # an evaluation's files, its process killed
    (dead_source / "candidate.py").parent.mkdir()
    (dead_source / "candidate.py").write_text("# from a killed run")
    live_source = tmp_path / f"accelopt-src-p{os.getpid()}-m4n"
    unknown_source = tmp_path / "accelopt-src-p9x_"  # no owner: an older accelopt's, left alone
    live_source.mkdir()
    unknown_source.mkdir()
    assert sorted(sweep_orphaned_folders(str(tmp_path))) == sorted([dead, dead_source])
    assert not dead.exists() and live.exists() and unknown.exists()
    assert not dead_source.exists() and live_source.exists() and unknown_source.exists()


def test_a_judge_home_names_the_process_that_owns_its_pool():
    worker = Worker("cpu", 3, None)
    try:
        assert worker.home.name.startswith(f"accelopt-judge-cpu3-p{os.getpid()}-")
        assert sweep_orphaned_folders(str(worker.home.parent)).count(worker.home) == 0 and worker.home.exists()
    finally:
        shutil.rmtree(worker.home, ignore_errors=True)


def test_a_sandbox_writes_its_caches_in_its_own_home_whatever_the_judge_had_set(tmp_path):
    """Inductor puts TORCHINDUCTOR_CACHE_DIR into the environment of a process that compiled: once
    the judge had, its confined torch.compile comparators could not write their cache (found on an
    H200 with KernelBench problems)."""
    from accelopt.tools.harness.judge_sandboxes import sandbox_env

    judge = {"PATH": "/usr/bin", "HOME": "/j", "TMPDIR": "/j", "TRITON_CACHE_DIR": "/j/triton-cache",
             "TORCHINDUCTOR_CACHE_DIR": "/j/torchinductor_root", "CUDA_VISIBLE_DEVICES": "0"}
    env = sandbox_env(judge, str(tmp_path))
    assert env["PATH"] == "/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor-cache")
    assert not any(v.startswith("/j") for v in env.values())


def test_evaluations_one_after_another_reuse_the_judge_that_just_served():
    """On the interpreter the pool holds a judge per core; handing them out in turn started the
    second judge (2-5 s of a core) for the second of two evaluations run one after another."""
    pool = WorkerPool("cpu", 3)
    try:
        for _ in range(3):
            with pool.lease() as worker:
                assert worker.slot == 0
        with pool.lease() as first, pool.lease() as second, pool.lease() as third:
            assert {first.slot, second.slot, third.slot} == {0, 1, 2}  # concurrent: a judge each
    finally:
        pool.close()
