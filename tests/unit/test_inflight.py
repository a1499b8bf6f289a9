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
    threading.Timer(0.05, quorum.land).start()  # another branch's reply lands first
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, key, call)
    assert inflight.in_flight(run) == 1 and inflight.landed_usage(run) == []  # not landed: nothing spent yet
    release.set()
    with inflight.detach_at(inflight.quorum(run, 2, 5)):  # the next iteration's branch asks the same call
        text, usage = inflight.start(run, key, call)
    assert (text, sent) == ("kernel", [1])  # collected, never sent again
    assert inflight.in_flight(run) == 0 and inflight.landed_usage(run) == []  # its spend is now the branch's


def test_a_landed_call_no_branch_collected_is_spent_and_a_failure_reaches_its_collector(tmp_path):
    run = str(tmp_path)
    quorum = inflight.quorum(run, 1, 1)
    quorum.land()  # met already: every call of this iteration that has not landed is detached at once
    gate = threading.Event()
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, "ok", lambda: (gate.wait(10), {"input_tokens": 3, "output_tokens": 4, "call": "c2"}))
    with inflight.detach_at(quorum), pytest.raises(inflight.Detached):
        inflight.start(run, "bad", lambda: (gate.wait(10), 1 / 0))
    gate.set()
    for _ in range(200):
        if inflight.in_flight(run) == 0:
            break
        threading.Event().wait(0.01)
    assert [u["call"] for u in inflight.landed_usage(run)] == ["c2"]
    with pytest.raises(ZeroDivisionError):  # the collecting branch gets the call's own failure
        inflight.start(run, "bad", lambda: pytest.fail("sent again"))
    inflight.forget(run)
    assert inflight.landed_usage(run) == [] and inflight.quorum(run, 1, 7).needed == 7


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
    ledger.settle(held, {"role": "executor", "input_tokens": 100, "output_tokens": 400})
    assert ledger.reserved.tokens == 0 and ledger.spent.tokens == 600


@pytest.mark.parametrize(("share", "replies", "needed"), [(0.75, 16, 12), (0.5, 3, 2), (1.0, 4, 4), (0.01, 4, 1),
                                                         (0.7, 10, 7)])
def test_the_replies_an_iteration_waits_for(share, replies, needed):
    assert inflight.needed(share, replies) == needed
