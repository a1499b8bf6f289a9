"""The replay server's latency model (evals/replay/latency.py): the numbers for a known request,
queueing past the concurrency limit, decode slowing with load, draws that depend on the key
alone, and a time scale of 0 that never sleeps."""

import dataclasses
import threading
import time

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


def test_decode_is_shared_among_the_streams_running_at_each_moment():
    model = LatencyModel(OSS, time_scale=0)
    first = model.enter(100, 0, 1500, at=0.0)
    alone = model.timing(first)
    assert alone.decode_s == pytest.approx(1500 / 150) and alone.streams == 1
    second = model.enter(100, 0, 1500, at=1.0)  # the first is still decoding: both slow down
    shared, both = 150 / 1.03, model.timing(first)
    # the first decoded 150 tokens alone (1.3125 - 0.3125 s), then 1350 shared with the second
    assert both.decode_s == pytest.approx(1 + 1350 / shared) and both.streams == 2
    later = model.timing(second)  # 1350 shared while the first runs, its last 150 alone: it speeds up
    assert later.decode_s == pytest.approx(1350 / shared + 1) and later.tok_s > shared
    again = model.admit(100, 0, 1500, at=both.end_s + later.end_s)  # both done: alone again
    assert again.streams == 1 and again.decode_s == pytest.approx(alone.decode_s)


def test_a_reply_sent_with_a_crowd_speeds_up_as_the_crowd_ends():
    """The slowest of 16 replies sent at once ends well before its rate among 16 would have it:
    each reply that ends leaves the rest more of the server (the tail an iteration waits on)."""
    model = LatencyModel(OSS, time_scale=0)
    flows = [model.enter(0, 0, 1000 + 125 * i, at=0.0) for i in range(16)]  # 1,000 to 2,875 tokens
    slowest = model.timing(flows[-1])
    assert slowest.streams == 16
    assert 2875 / 150 < slowest.decode_s < 2875 / model.rate(16) - 2.0
    ends = [model.timing(f).end_s for f in flows]
    assert ends == sorted(ends)  # the shorter, the sooner: every stream got the same share


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


def test_time_scale_zero_never_waits_and_others_wait_the_modelled_time_scaled():
    quick = LatencyModel(OSS, time_scale=0)
    flow = quick.enter(0, 0, 150 * 60)  # a minute of decode
    started = time.monotonic()
    quick.until(flow)
    assert time.monotonic() - started < 0.5 and flow.end_s is None  # answered at once: nothing was modelled
    scaled = LatencyModel(OSS, time_scale=0.002)  # 0.3 + 2 modelled s: about 5 ms
    flows = [scaled.enter(0, 0, 150), scaled.enter(0, 0, 300)]
    started = time.monotonic()
    threads = [threading.Thread(target=scaled.until, args=(f,)) for f in reversed(flows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert 0.002 * 2.3 <= time.monotonic() - started < 2.0  # waited the modelled time, scaled
    first, second = (f.end_s for f in flows)
    assert first is not None and second is not None and first < second  # the shorter ended first
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


def test_the_peak_is_every_stream_slot_decoding_and_no_crowd_decodes_faster():
    """The server's most tokens a second (the floor a run's model calls cannot beat, stats'
    decode_floor_s): max_num_seqs streams at their shared rate; fewer streams decode less, and
    a crowd past the slots queues rather than adding rate."""
    model = LatencyModel(OSS, time_scale=0)
    assert OSS.peak_decode_tok_s == pytest.approx(32 * 150 / (1 + 0.03 * 31))
    assert all(n * model.rate(n) < OSS.peak_decode_tok_s for n in range(1, 32))
    flows = [model.enter(0, 0, 3000, at=0.0) for _ in range(40)]  # 8 past the slots wait their turn
    last = max(model.timing(f).end_s for f in flows)
    assert last >= 40 * 3000 / OSS.peak_decode_tok_s
    assert OSS.describe()["peak_decode_tok_s"] == pytest.approx(OSS.peak_decode_tok_s, abs=0.1)
