"""The process's judges let go when idle (tools/harness/pool.py): past the idle limit with no lease
their processes are killed and their homes removed, never while a lease is held, from any thread;
the next lease starts them again. Stand-in judges (a sleeping process) keep these fast; the real
judges' release is tests/integration/test_check_graph.py's."""

import threading
import time

import pytest

from accelopt.tools.harness import pool as pools
from accelopt.tools.harness.pool import WorkerPool
from accelopt.tools.settings import ConfigError
from tests.conftest import alive


@pytest.fixture
def sleeper(tmp_path, monkeypatch):
    judge = tmp_path / "judge.py"
    judge.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(pools, "JUDGE", judge)


def _until(condition, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_idle_judges_are_killed_and_their_homes_removed_and_the_next_lease_starts_them(sleeper):
    pool = WorkerPool("cpu", 2, idle_s=0.4)
    try:
        pool.warm()
        pids, homes = pool.judge_pids(), [w.home for w in pool.workers]
        assert len(pids) == 2 and all(h.is_dir() for h in homes)
        with pool.lease():
            time.sleep(1.0)  # held past the limit: nothing goes
            assert pool.judge_pids() == pids and pool.releases == 0
        assert _until(lambda: pool.releases == 1, 5.0)
        assert pool.judge_pids() == [] and not any(alive(p) for p in pids)
        assert not any(h.exists() for h in homes)
        with pool.lease() as worker:  # as Worker.request does with a judge that is gone
            worker._start()
            assert worker.home.is_dir() and worker.home not in homes and pool.judge_pids() not in ([], pids)
    finally:
        pool.close()
    assert pool.judge_pids() == [] and not any(w.home.exists() for w in pool.workers)


def test_no_release_under_a_lease_whatever_the_threads(sleeper):
    """Leases from several threads, a judge started in each where there is none, the limit far
    below the gaps between them: a leased judge is always running and its home there. Between
    rounds every thread stands outside its lease until the pool has let go, so each round's first
    leases race the restart (whether a release falls between two racing leases is the scheduler's
    call; these rounds make sure one does)."""
    pool = WorkerPool("cpu", 3, idle_s=0.01)
    wrong: list[str] = []
    rounds = 3

    def let_go() -> bool:
        return pool.judge_pids() == [] and not any(w.home.exists() for w in pool.workers)

    def released() -> None:  # the barrier's action: one thread runs it, and none holds a lease
        if not _until(let_go, 5.0):
            wrong.append("judges kept with every lease ended")

    between_rounds = threading.Barrier(4, action=released)

    def evaluations() -> None:
        for _ in range(rounds):
            between_rounds.wait()
            for _ in range(5):
                with pool.lease() as worker:
                    if worker.proc is None:
                        worker._start()
                    time.sleep(0.01)
                    if worker.proc is None or worker.proc.poll() is not None or not worker.home.is_dir():
                        wrong.append(f"judge {worker.slot} released under its lease")
                time.sleep(0.02)

    threads = [threading.Thread(target=evaluations) for _ in range(4)]
    try:
        with pool.lease() as worker:  # a judge to release before the first round
            worker._start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong, wrong
        assert pool.releases >= rounds  # it let go before each round, with judges started in each
        assert _until(lambda: pool.judge_pids() == [], 5.0)
    finally:
        pool.close()


def test_the_process_pool_reads_its_idle_limit_at_every_call(monkeypatch, tmp_path):
    monkeypatch.setattr(pools, "_pools", {})
    monkeypatch.setattr(pools, "make_pool", lambda device, count: WorkerPool(device, 1))
    monkeypatch.setenv("ACCELOPT_JUDGE_IDLE_S", "30")
    pool = pools.get_pool("cpu", 0)
    try:
        assert pool.idle_s == 30.0
        monkeypatch.setenv("ACCELOPT_JUDGE_IDLE_S", "0")  # kept until the process exits
        assert pools.get_pool("cpu", 0) is pool and pool.idle_s is None
        monkeypatch.delenv("ACCELOPT_JUDGE_IDLE_S")
        assert pools.get_pool("cpu", 0).idle_s == 600.0
        monkeypatch.setenv("ACCELOPT_JUDGE_IDLE_S", "soon")
        with pytest.raises(ConfigError, match="^ACCELOPT_JUDGE_IDLE_S='soon': use a number of seconds"):
            pools.get_pool("cpu", 0)
    finally:
        pools.close_pools()
    assert pools._pools == {} and not pool.workers[0].home.exists()


def test_warming_one_judge_starts_the_one_the_first_lease_gets(sleeper):
    """A run's first judge starts before the graph's imports (runner.start_first_judge): only the
    judge the first lease is handed, not one per core."""
    pool = WorkerPool("cpu", 3)
    try:
        pool.warm(judges=1)
        started = [w for w in pool.workers if w.proc is not None]
        assert started == [pool.workers[0]] and len(pool.judge_pids()) == 1
        with pool.lease() as worker:
            assert worker is pool.workers[0] and worker.proc is not None
    finally:
        pool.close()


def test_on_the_interpreter_a_second_judge_starts_only_once_the_first_stayed_busy(sleeper, monkeypatch):
    """An evaluation that finds the started judge busy waits for it up to START_WAIT_S (a start costs
    as much CPU as an evaluation there); past that, it starts a judge of its own."""
    monkeypatch.setattr(pools, "START_WAIT_S", 1.0)
    pool = WorkerPool("cpu", 2)
    got: list = []

    def second() -> None:
        started = time.monotonic()
        with pool.lease() as worker:
            got.append((worker, time.monotonic() - started))

    try:
        pool.warm(judges=1)
        first = pool.workers[0]
        with pool.lease() as worker:  # busy for less than the wait: the second evaluation takes it after
            assert worker is first
            waiting = threading.Thread(target=second)
            waiting.start()
            time.sleep(0.3)
        waiting.join()
        assert got[0][0] is first and 0.25 <= got[0][1] < 1.0 and pool.judge_pids() == [first.proc.pid]
        with pool.lease():  # busy for longer: the second evaluation gets the judge not yet started
            waiting = threading.Thread(target=second)
            waiting.start()
            waiting.join(5.0)
        assert got[1][0] is pool.workers[1] and 1.0 <= got[1][1] < 2.0
    finally:
        pool.close()


def test_a_run_starts_its_first_judge_only_where_its_evaluations_run_here(monkeypatch, softmax_task):
    """The driver's early start: a Triton task evaluated by this process's pool; not a Ray
    cluster's run, nor a task that does not load."""
    from accelopt.graph import driver
    from accelopt.nodes.context import RunContext
    from accelopt.tools.harness import runner

    started: list[str | None] = []
    monkeypatch.setattr(runner, "start_first_judge", started.append)
    driver._start_judge(RunContext(device="cpu"), str(softmax_task))
    driver._start_judge(RunContext(device="auto"), str(softmax_task))
    driver._start_judge(RunContext(device="cpu", ray_address="auto"), str(softmax_task))
    driver._start_judge(RunContext(device="cpu"), str(softmax_task.parent / "no-such-task"))
    driver._start_judge(RunContext(device="cpu"), None)
    assert started == ["cpu", None]
