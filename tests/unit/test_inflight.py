"""tools/inflight.py: a call outlives the branch that stopped waiting for it, is sent once, and
its spend is neither lost nor counted twice (tools/budget.py keeps its reservation)."""

import threading

import pytest

from accelopt.tools import inflight
from accelopt.tools.budget import Limits, RunLedger


def test_a_call_detached_at_the_quorum_goes_on_and_a_later_ask_collects_it_unsent(tmp_path):
    run, key = str(tmp_path), "k1"
    release, sent = threading.Event(), []

    def call():
        sent.append(1)
        assert release.wait(10)
        return "kernel", {"role": "executor", "input_tokens": 10, "output_tokens": 5, "call": "c1"}

    quorum = inflight.quorum(run, 1, 1)
    threading.Timer(0.05, quorum.land, args=["i1.k0"]).start()  # another branch's reply lands first
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, key, call)
    assert inflight.in_flight(run) == 1
    release.set()
    with inflight.detach_at(inflight.quorum(run, 2, 5)):  # the next iteration's branch asks the same call
        text, usage = inflight.start(run, key, call)
    assert (text, sent) == ("kernel", [1])  # collected, never sent again
    assert inflight.in_flight(run) == 0  # collected: it left the registry


def test_a_failure_reaches_its_collector_and_a_stopping_run_collects_what_landed(tmp_path):
    run = str(tmp_path)
    quorum = inflight.quorum(run, 1, 1)
    quorum.land("i1.k0")  # met already: every call of this iteration that has not landed is detached at once
    gate = threading.Event()
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, "ok", lambda: (gate.wait(10), {"input_tokens": 3, "output_tokens": 4, "call": "c2"}))
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, "bad", lambda: (gate.wait(10), 1 / 0))
    gate.set()
    with pytest.raises(ZeroDivisionError):  # the collecting branch gets the call's own failure
        inflight.start(run, "bad", lambda: pytest.fail("sent again"))
    assert [u["call"] for u in inflight.collect(run)] == ["c2"]  # waited for, its spend handed over
    assert inflight.in_flight(run) == 0 and inflight.collect(run) == []
    inflight.forget(run)
    assert inflight.quorum(run, 1, 7).needed == 7


def test_outside_a_quorum_a_call_runs_in_the_callers_thread():
    caller = threading.current_thread()
    assert inflight.start(None, "here", lambda: threading.current_thread()) is caller


def test_the_ledger_keeps_a_reservation_in_flight_across_an_iteration_boundary():
    ledger = RunLedger()
    ledger.sync([], Limits(max_tokens=100_000))
    held, refusal = ledger.admit("executor", 100, (0.0, 0.0), max_output=1000)
    assert refusal is None and ledger.reserved.tokens == 1100
    ledger.sync([{"role": "planner", "input_tokens": 50, "output_tokens": 50, "call": "p"}], Limits(max_tokens=100_000))
    assert ledger.reserved.tokens == 1100 and ledger.spent.tokens == 100  # the call outlived its iteration
    ledger.settle(held, {"role": "executor", "input_tokens": 100, "output_tokens": 400, "call": "e"})
    assert ledger.reserved.tokens == 0 and ledger.spent.tokens == 600


def test_a_call_that_landed_before_the_state_holds_it_counts_once_at_every_sync():
    """Landed after its branch moved on, not yet collected: the state's ledger lacks it, the run's
    does not (it settled there, whenever it landed against a sync); collected, it counts once."""
    ledger, limits = RunLedger(), Limits(max_tokens=100_000)
    ledger.sync([], limits, fresh=True)
    held, _ = ledger.admit("executor", 100, (0.0, 0.0), max_output=1000)
    late = {"role": "executor", "input_tokens": 100, "output_tokens": 400, "call": "e"}
    ledger.settle(held, late)
    planner = {"role": "planner", "input_tokens": 50, "output_tokens": 50, "call": "p"}
    ledger.sync([planner], limits)
    assert ledger.spent.tokens == 600  # the state holds the planner only
    ledger.sync([planner, late], limits)
    assert ledger.spent.tokens == 600  # collected: once
    asked_twice = {"role": "planner", "input_tokens": 100, "output_tokens": 100, "call": "p+q"}  # _merged
    ledger.settle(None, {"role": "planner", "input_tokens": 50, "output_tokens": 50, "call": "q"})
    ledger.sync([asked_twice, late], limits)
    assert ledger.spent.tokens == 700  # the joined record covers both of its requests
    ledger.sync([], limits, fresh=True)
    assert ledger.spent.tokens == 0  # a run's first iteration: another run's calls are not its own


@pytest.mark.parametrize(("share", "replies", "needed"), [(0.75, 16, 12), (0.5, 3, 2), (1.0, 4, 4), (0.01, 4, 1),
                                                         (0.7, 10, 7)])
def test_the_replies_an_iteration_waits_for(share, replies, needed):
    assert inflight.needed(share, replies) == needed


def test_a_resumed_iteration_counts_the_replies_that_landed_before_the_kill(tmp_path):
    """The checkpoint does not run again the branches that finished before a kill: a new process's
    quorum that counted only its own replies waited for every reply it sent (seen after resumes)."""
    from accelopt.nodes.records import attempt
    from accelopt.nodes.services import fill_within_quorum
    from accelopt.policies.interface import Kernel

    run = str(tmp_path)
    state = {"quorum": 2, "run_dir": run, "iteration": 3}
    release = threading.Event()

    def branch(k: int, reply) -> str:
        kernel = attempt(f"i3.m0.p0.k{k}", 3, "baseline", "p0", "plan", None, 0)
        written = fill_within_quorum(state, kernel, 3, lambda: inflight.start(run, f"call-{k}", reply), counted=True)
        return written["current"].get("status") or "written"  # a kernel's status is the judge's to give

    def landed() -> Kernel:
        return Kernel(source="def kernel(): pass\n")

    def slow() -> Kernel:
        release.wait(10)
        return landed()

    try:
        assert [branch(0, landed), branch(1, landed)] == ["written", "written"]  # landed in the killed process
        inflight.forget(run)  # a new process: no quorum in memory
        assert branch(1, landed) == "written"  # a cut-off branch run again, its reply landed once
        assert branch(2, slow) == "in_flight"  # the quorum was met before the kill: not waited on
    finally:
        release.set()
    assert inflight.quorum(run, 3, 2).landed == 2
