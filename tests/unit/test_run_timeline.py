"""A run's timeline: spans written by tools/timeline.py, read per iteration by
evals/reporting/timeline.py (unions, not sums, of overlapping waits)."""

import inspect
import json

from accelopt.evals.reporting.timeline import max_overlap, read_timeline, render, union_s
from accelopt.tools import timeline


def test_overlapping_intervals_count_once():
    assert union_s([(0, 10), (5, 12), (20, 21)]) == 13
    assert union_s([(0, 10), (2, 3)]) == 10 and union_s([]) == 0
    assert max_overlap([(0, 10), (5, 12), (11, 13), (20, 21)]) == 2 and max_overlap([]) == 1
    assert max_overlap([(0, 5), (5, 6)]) == 1  # one ends as the next starts


def test_an_iteration_reads_model_waits_and_gpu_time_held_apart_from_waiting_for_it(tmp_path):
    spans = [
        {"kind": "node", "node": "recall", "iteration": 1, "start": 100, "end": 101},
        {"kind": "llm", "role": "planner", "iteration": 1, "start": 101, "end": 121},
        {"kind": "llm", "role": "executor", "iteration": 1, "start": 121, "end": 141},
        {"kind": "llm", "role": "executor", "iteration": 1, "start": 122, "end": 142},
        # two evaluations on one GPU: the second waited 8 s for the first
        {"kind": "eval", "candidate": "a", "gpu": "0", "start": 142, "end": 150,
         "phases_s": {"checks": 3, "timing": 2, "lease_wait": 0}},
        {"kind": "eval", "candidate": "b", "gpu": "0", "start": 142, "end": 158,
         "phases_s": {"checks": 4, "timing": 3, "lease_wait": 8}},
        {"kind": "node", "node": "record", "iteration": 1, "start": 159, "end": 160},
        {"kind": "node", "node": "recall", "iteration": 2, "start": 160, "end": 161},
        {"kind": "node", "node": "record", "iteration": 2, "start": 170, "end": 180},
    ]
    (tmp_path / timeline.FILE).write_text("".join(json.dumps(s) + "\n" for s in spans) + '{"torn')
    found = read_timeline(tmp_path)
    first = found.iterations[0]
    assert [p.label for p in found.iterations] == ["iteration 1", "iteration 2"] and found.gpus == 1
    assert first.wall_s == 60 and first.model_wait_s == 41 and first.model_wait_by_role_s == {"executor": 21,
                                                                                               "planner": 20}
    assert first.gpu_held_s == 16 and first.gpu_seconds == 16 and first.evaluations == 2
    assert first.steps_s == {"compile+check": 7, "timing": 5, "waiting for a judge": 8}
    assert abs(found.gpu_share(first) - 16 / 60) < 1e-9 and not found.interpreter
    assert found.total.wall_s == 80 and found.iterations[1].evaluations == 0
    assert all(len(line) <= 80 for line in render(found).splitlines())


def test_a_timed_node_keeps_the_signature_langgraph_reads_and_records_its_iteration(tmp_path):
    def node(state: dict, runtime: object) -> dict:
        return {"iteration": state["iteration"] + 1}

    timed = timeline.timed_node("recall", node)
    assert list(inspect.signature(timed).parameters) == ["state", "runtime"]
    assert timed({"run_dir": str(tmp_path), "iteration": 3}, runtime=None) == {"iteration": 4}
    [span] = timeline.read(tmp_path)
    assert span["kind"] == "node" and span["node"] == "recall" and span["iteration"] == 4
    assert span["end"] >= span["start"]


def test_an_iteration_says_what_its_wall_waited_on_in_order(tmp_path):
    """Plans, then the first attempts to their last evaluation, then the fixes the selector waited
    for, then the lessons: the parts follow each other and add up to the wall."""
    spans = [
        {"kind": "node", "node": "recall", "iteration": 1, "start": 0, "end": 1},
        {"kind": "llm", "role": "planner", "iteration": 1, "start": 1, "end": 6},
        {"kind": "node", "node": "planner", "iteration": 1, "start": 1, "end": 6},
        {"kind": "llm", "role": "executor", "candidate": "i1.m0.p0.k0", "iteration": 1, "start": 6, "end": 12},
        {"kind": "llm", "role": "executor", "candidate": "i1.m0.p0.k1", "iteration": 1, "start": 6, "end": 14},
        {"kind": "eval", "candidate": "i1.m0.p0.k0", "gpu": "0", "start": 12, "end": 20},
        {"kind": "eval", "candidate": "i1.m0.p0.k1", "gpu": "0", "start": 14, "end": 25},  # the last first attempt
        {"kind": "llm", "role": "fixer", "candidate": "i1.m0.p0.k0.f1", "iteration": 1, "start": 20, "end": 30},
        {"kind": "eval", "candidate": "i1.m0.p0.k0.f1", "gpu": "0", "start": 30, "end": 40},
        {"kind": "node", "node": "selector", "iteration": 1, "start": 40, "end": 40},
        # the summarizer names the candidates it learned from: not a first attempt's span
        {"kind": "llm", "role": "summarizer", "candidate": "i1.m0.p0.k1", "iteration": 1, "start": 40, "end": 43},
        {"kind": "node", "node": "summarizer", "iteration": 1, "start": 40, "end": 44},
        {"kind": "node", "node": "record", "iteration": 1, "start": 44, "end": 45},
    ]
    (tmp_path / timeline.FILE).write_text("".join(json.dumps(s) + "\n" for s in spans))
    [first] = read_timeline(tmp_path).iterations
    assert first.path_s == {"plans": 6, "first attempts": 19, "fixes after them": 15, "lessons": 4, "rest": 1}
    assert sum(first.path_s.values()) == first.wall_s == 45
    shown = render(read_timeline(tmp_path))
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert "iter 1" in shown.split("what each iteration's wall waited on")[1]


def test_an_iteration_a_kill_cut_off_reads_as_cut_and_plans_made_ahead_for_none_are_no_iteration(tmp_path):
    """A pipeline run killed in iteration 5: its recall is a point and no node of it ended, but its
    calls did; iteration 6's planners ran ahead beside it and 6 never began."""
    spans = [
        {"kind": "node", "node": "recall", "iteration": 4, "start": 0, "end": 0},
        {"kind": "llm", "role": "executor", "iteration": 4, "candidate": "i4.m0.p0.k0", "start": 0, "end": 60},
        {"kind": "node", "node": "record", "iteration": 4, "start": 66, "end": 66},
        {"kind": "node", "node": "recall", "iteration": 5, "start": 66, "end": 66},
        {"kind": "llm", "role": "fixer", "iteration": 5, "candidate": "i4.m0.p0.k0.f1", "start": 66, "end": 92},
        {"kind": "llm", "role": "planner", "iteration": 6, "start": 66, "end": 87},
        {"kind": "node", "node": "planner", "iteration": 6, "start": 66, "end": 87},
    ]
    (tmp_path / timeline.FILE).write_text("".join(json.dumps(s) + "\n" for s in spans))
    found = read_timeline(tmp_path)
    assert [(p.label, p.finished) for p in found.iterations] == [("iteration 4", True), ("iteration 5", False)]
    assert found.iterations[1].wall_s == 26 and found.iterations[1].model_calls == 2
    text = render(found)
    assert "iter 5 cut" in text and "iter 6" not in text and "cut: an iteration the run never recorded" in text


def test_a_call_an_iteration_moved_on_without_waits_in_both_and_is_counted_where_it_was_asked(tmp_path):
    spans = [
        {"kind": "node", "node": "recall", "iteration": 1, "start": 0, "end": 1},
        {"kind": "llm", "role": "executor", "iteration": 1, "candidate": "i1.m0.p0.k0", "start": 1, "end": 11,
         "output_tokens": 1000},
        {"kind": "llm", "role": "executor", "iteration": 1, "candidate": "i1.m0.p0.k1", "start": 1, "end": 25,
         "output_tokens": 2400},
        {"kind": "node", "node": "record", "iteration": 1, "start": 14, "end": 15},
        {"kind": "node", "node": "recall", "iteration": 2, "start": 15, "end": 16},
        {"kind": "llm", "role": "executor", "iteration": 2, "candidate": "i2.m0.p0.k0", "start": 16, "end": 20},
        {"kind": "node", "node": "record", "iteration": 2, "start": 29, "end": 30},
    ]
    (tmp_path / timeline.FILE).write_text("".join(json.dumps(s) + "\n" for s in spans))
    found = read_timeline(tmp_path)
    first, second = found.iterations
    assert (first.model_calls, first.outlived_calls, first.model_wait_s) == (2, 1, 14)  # 1-15, clipped at its end
    assert (second.model_calls, second.outlived_calls, second.model_wait_s) == (1, 0, 10)  # 15-25 of the first
    assert found.total.model_calls == 3 and found.total.outlived_calls == 0
    # the model's pace: the outlived call's 2,400 tokens are split by its 14 s in the first and 10 s in the second
    assert first.tokens_decoded == 1000 + 1400 and second.tokens_decoded == 1000  # the second's own call: no tokens
    assert first.calls_in_flight == round((10 + 14) / 15, 2) and second.calls_in_flight == round((10 + 4) / 15, 2)
    assert found.total.tokens_decoded == 3400
    pace = render(found).splitlines()
    assert any(line.split() == ["iter", "1", "15", f"{2400 / 15:.0f}", f"{24 / 15:.1f}", "0"] for line in pace), pace
    assert "iter 1: 1" in render(found).splitlines()[-1]
    many = found.model_copy(update={"iterations": [first.model_copy(update={"label": f"iteration {i}"})
                                                   for i in range(1, 17)]})
    shown = render(many).splitlines()
    assert all(len(line) <= 80 for line in shown) and "iter 16: 1" in shown[-1]  # wrapped, whole
