"""bench_one_verdict's summary of one kernel checked in several processes (issue 65's goals 2-3): one
word or several, every pair of reported intervals overlapping or not, the rounds' own pairs counted
beside them, and the shared-key advice said in how many processes; its two-height softmax is a
task that loads, whose workloads differ only in their row count."""

from accelopt.evals.bench_one_verdict import SHARED_KEY, agreement, pair, row
from accelopt.tools.task import load_task


def checked(word: str, speedup: float, reported: tuple, rounds: tuple, advice: bool = False, status="verified"):
    notes = [f"softmax_kernel: M8192_N4096 {SHARED_KEY} with M1024_N4096"] if advice else []
    record = {"status": status, "flags": [], "autotune": {"candidate": {"notes": notes}},
              "verdicts": {"against": {"word": word, "speedup": speedup, "ci_low": reported[0], "ci_high": reported[1],
                                       "rounds_low": rounds[0], "rounds_high": rounds[1]}}}
    return row(record, {"wall_s": 10.0, "exit": 0})


def test_intervals_that_overlap_across_processes_where_the_rounds_do_not_and_one_word():
    rows = [checked("faster", 1.286, (1.261, 1.347), (1.286, 1.321), advice=True),
            checked("faster", 1.368, (1.334, 1.396), (1.361, 1.369), advice=True),
            checked("faster", 1.0, (0.9, 1.1), (0.95, 1.05), status="wrong_output")]
    got = agreement(rows)
    assert got["processes"] == 3 and got["verified"] == 2 and got["statuses"] == ["verified", "wrong_output"]
    assert got["shared_key_advice"] == "2 of 2"
    vs = got["against"]
    assert vs["one_word"] and vs["words"] == ["faster"] and vs["every_reported_pair_overlaps"]
    assert vs["reported_pairs_overlapping"] == "1 of 1" and vs["rounds_pairs_overlapping"] == "0 of 1"


def test_two_words_intervals_apart_and_advice_in_some_processes_are_each_said():
    rows = [checked("within noise", 0.999, (0.979, 1.019), (0.998, 1.0), advice=True),
            checked("undecided", 1.0, (0.975, 1.03), (0.994, 1.01)),
            checked("faster", 1.2, (1.15, 1.25), (1.17, 1.22))]
    got = agreement(rows)
    assert got["shared_key_advice"] == "1 of 3"
    vs = got["against"]
    assert not vs["one_word"] and vs["words"] == ["faster", "undecided", "within noise"]
    assert not vs["every_reported_pair_overlaps"] and vs["reported_pairs_overlapping"] == "1 of 3"


def test_the_two_height_softmax_loads_and_its_workloads_share_a_width(tmp_path):
    task_dir, kernel, against = pair("softmax_shared_key", tmp_path)
    task = load_task(task_dir)
    widths = {w.params["N"] for w in task.spec.workloads}
    heights = {w.params["M"] for w in task.spec.workloads}
    assert widths == {4096} and heights == {1024, 8192}
    assert kernel.is_file() and 'key=["n_cols"]' in kernel.read_text() and against.name == "baseline.py"
