"""The replay server's latency model (evals/replay/latency.py): the numbers for a known request,
queueing past the concurrency limit, decode slowing with load, draws that depend on the key
alone, and a time scale of 0 that never sleeps."""

import dataclasses

import pytest

from accelopt.evals.replay.latency import (
    PROFILES,
    LatencyModel,
    count_tokens,
    draw_reasoning,
    profile,
    unit,
)

OSS = PROFILES["gpt-oss-120b"]


def test_the_stated_numbers_of_a_known_request():
    model = LatencyModel(OSS, time_scale=0)
    # 8,000 prompt tokens, 1,500 reasoning and 500 content tokens, alone on the server
    t = model.admit(8000, 1500, 500, at=0.0)
    assert t.queue_s == 0 and t.streams == 1
    assert t.ttft_s == pytest.approx(0.3 + 8000 / 8000)
    assert t.decode_s == pytest.approx(2000 / 150)
    assert t.total_s == pytest.approx(1.3 + 2000 / 150)
    assert t.completion_tokens == 2000 and t.end_s == pytest.approx(t.total_s)
    assert (OSS.prefill_tok_s, OSS.ttft_base_s, OSS.decode_tok_s, OSS.max_num_seqs) == (8000, 0.3, 150, 32)


def test_decode_slows_with_the_streams_running():
    model = LatencyModel(OSS, time_scale=0)
    first = model.admit(100, 0, 1500, at=0.0)
    second = model.admit(100, 0, 1500, at=1.0)  # the first is still decoding
    assert second.streams == 2
    assert second.tok_s == pytest.approx(150 / 1.03)
    assert second.decode_s > first.decode_s
    later = model.admit(100, 0, 1500, at=first.end_s + second.end_s)  # both done: alone again
    assert later.streams == 1 and later.decode_s == pytest.approx(first.decode_s)


def test_requests_past_the_concurrency_limit_queue():
    two = dataclasses.replace(OSS, max_num_seqs=2, slowdown=0.0)
    model = LatencyModel(two, time_scale=0)
    a = model.admit(0, 0, 150 * 10, at=0.0)   # ends at 10.3
    b = model.admit(0, 0, 150 * 20, at=0.0)   # ends at 20.3
    c = model.admit(0, 0, 150, at=1.0)        # both slots taken: waits for a
    assert a.queue_s == b.queue_s == 0
    assert c.queue_s == pytest.approx(a.end_s - 1.0)
    assert c.end_s == pytest.approx(a.end_s + 0.3 + 1.0)
    d = model.admit(0, 0, 150, at=2.0)        # b and c hold the slots: waits for c, which ends first
    assert d.queue_s == pytest.approx(c.end_s - 2.0)
    e = model.admit(0, 0, 150, at=b.end_s + 1)  # everything ended: no wait
    assert e.queue_s == 0


def test_draws_depend_on_the_key_alone():
    assert unit("a", 1) == unit("a", 1) != unit("a", 2)
    assert 0 <= unit("x") < 1
    draws = {draw_reasoning(OSS, "planner", f"key{i}") for i in range(200)}
    assert draws == {draw_reasoning(OSS, "planner", f"key{i}") for i in range(200)}  # again: the same
    assert min(draws) >= 1500 and max(draws) <= 4000 and len(draws) > 100
    assert all(800 <= draw_reasoning(OSS, "fixer", f"k{i}") <= 2000 for i in range(50))
    assert draw_reasoning(OSS, "unknown", "k") == 0
    assert draw_reasoning(PROFILES["gpt-4.1-mini-hosted"], "planner", "k") == 0  # not a reasoning model


def test_time_scale_zero_never_sleeps_and_others_scale_the_wait():
    slept: list[float] = []
    LatencyModel(OSS, time_scale=0, sleep=slept.append).wait(30.0)
    assert slept == []
    LatencyModel(OSS, time_scale=0.5, sleep=slept.append).wait(30.0)
    assert slept == [15.0]
    with pytest.raises(ValueError):
        LatencyModel(OSS, time_scale=-1)


def test_the_modelled_clock_runs_at_the_time_scale():
    now = [100.0]
    model = LatencyModel(OSS, time_scale=0.1, clock=lambda: now[0])
    now[0] += 2.0  # two real seconds are twenty modelled ones
    assert model.now() == pytest.approx(20.0)
    assert model.admit(0, 0, 0).arrival_s == pytest.approx(20.0)


def test_tokens_and_profiles():
    assert count_tokens("") == 0 and count_tokens("abcd") == 1 and count_tokens("abcde") == 2
    assert {"gpt-oss-120b", "gpt-4.1-mini-hosted"} <= set(PROFILES)
    assert profile("gpt-4.1-mini-hosted").decode_tok_s == 75
    with pytest.raises(ValueError, match="unknown profile"):
        profile("gpt-9")
