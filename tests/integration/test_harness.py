"""The evaluation harness on the CPU interpreter: statuses for every failure kind."""

from pathlib import Path

import pytest

from accelopt.tools.harness.runner import evaluate
from accelopt.tools.task import load_task
from tests.conftest import ROOT
from tests.scripted import BASELINE, BROKEN, WRONG

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    import shutil

    from tests.conftest import TASKS

    dst = tmp_path_factory.mktemp("h") / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return load_task(dst)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "evals" / "tasks").iterdir()
                                         if (p / "task.json").is_file()))
def test_bundled_baselines_verify_on_the_interpreter(name):
    from tests.conftest import TASKS

    result = evaluate(load_task(TASKS / name), load_task(TASKS / name).baseline_source, device="cpu")
    assert result.status == "verified", result.error
    assert result.timer == "interpreter_wall"
    assert set(result.workloads) == {w.name for w in load_task(TASKS / name).spec.interpreter_workloads}
    assert all(t.median_us > 0 and t.samples == 6 and len(t.round_medians_us) == 2 and t.flops > 0 and t.bytes > 0
               for t in result.workloads.values())
    # the shape of the largest input, as the judge made it: what a lesson's row length is read from
    assert all(t.input_shape for t in result.workloads.values())
    if name == "softmax":
        assert {n: t.input_shape for n, t in result.workloads.items()} == {"M4_N37": [4, 37], "M3_N130": [3, 130]}


CASES = {
    "syntax": (BROKEN, "compile_error", "SyntaxError"),
    # Static rules only advise; the evidence is the call itself: no Triton launch at all.
    "no_jit": ("import torch\n\ndef run(x):\n    return torch.softmax(x, -1)\n", "cheat_suspected",
               "outside the Triton launches"),
    "wrong": (WRONG, "wrong_output", "max abs err"),
    "nan": (BASELINE.replace("num / den", "num / (den * 0.0)"), "nan", "NaN/Inf"),
    "shape": (BASELINE.replace("return out", "return out[:, :-1]"), "shape_mismatch", "shape"),
    "dtype": (BASELINE.replace("out = torch.empty_like(x)", "out = torch.empty_like(x, dtype=torch.float16)"),
              "dtype_mismatch", "float16"),
    "raises": (BASELINE.replace("return out", "raise RuntimeError('boom')"), "runtime_error", "boom"),
    "abort": (BASELINE.replace("return out", "import os; os.abort()"), "crashed", "SIGABRT"),
    # A kernel that prints a fake "verified" result line must not be believed.
    "fake_result": (BASELINE.replace("return out", "print('@@ACCELOPT_RESULT@@{\"status\": \"verified\"}'); "
                                     "import os; os._exit(0)"), "runtime_error", "exited with code 0"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_statuses(task, case):
    source, status, needle = CASES[case]
    result = evaluate(task, source, device="cpu")
    assert result.status == status, result.error
    assert needle in result.error


def test_unwritten_outputs_read_as_poison(task):
    # The mask leaves each row's last element unwritten; zero-filled memory could hide that.
    source = BASELINE.replace("mask = offs < n_cols\n", "mask = offs < n_cols - 1\n")
    result = evaluate(task, source, device="cpu")
    assert result.status == "nan" and "poison" in result.error


def test_interleaved_comparison_on_the_interpreter_reports_the_interval_but_decides_nothing(task):
    """16x the work shows in the interpreter's wall clock, but interpreter times are not
    performance: the interval is reported, the kernel is neither faster nor slower."""
    from tests.scripted import SLOW

    result = evaluate(task, SLOW, device="cpu", compare={"baseline": BASELINE}, rounds=3)
    vs = result.versus["baseline"]
    assert result.status == "verified" and vs.rounds == 3 and vs.ci_high < 1.0
    assert not vs.slower and not vs.faster
    assert result.rounds is not None and (result.rounds.ran, result.rounds.stopped) == (3, "interpreter")
    assert set(result.compare["baseline"]) == set(result.workloads)
    assert all(len(t.round_medians_us) == 3 for t in [*result.workloads.values(), *result.compare["baseline"].values()])


def test_a_kernel_against_an_identical_copy_is_neither_faster_nor_slower(task):
    """The interpreter decides nothing: identical copies come out neither faster nor slower every
    time (with 2 rounds, the range used to exclude 1 about half of the time)."""
    from accelopt.tools.harness.pool import WorkerPool

    pool = WorkerPool("cpu", 1)
    try:
        for _ in range(3):
            result = evaluate(task, task.baseline_source, device="cpu", pool=pool,
                              compare={"baseline": task.baseline_source})
            vs = result.versus["baseline"]
            assert result.status == "verified", result.error
            assert not vs.faster and not vs.slower, vs
            assert vs.rounds == 2 and result.rounds is not None and result.rounds.stopped == "interpreter"
    finally:
        pool.close()


def test_reference_outputs_are_computed_once_per_workload_and_seed_and_never_leak_a_mutation(tmp_path):
    """Each evaluation draws inputs no earlier one saw (its own seed), and the reference runs once per
    workload x seed; the judge keeps inputs and outputs between requests, so a replay of a seed
    (`check --replay`) runs no reference at all. A kernel that writes into its inputs gets clones, so
    the replay still sees the inputs make_inputs made."""
    import shutil

    from accelopt.tools.harness.pool import WorkerPool
    from tests.conftest import TASKS

    dst = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    log = tmp_path / "reference_calls.log"
    # each call's inputs by a digest of their bytes (a weighted sum collided: one-hot rows weigh only
    # their positions, and two draws' positions sum alike about once in 50)
    reference = (dst / "reference.py").read_text().replace(
        "def reference(x):\n",
        f"def reference(x):\n    import hashlib\n    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(f'{tuple(x.shape)} {hashlib.sha256(x.double().contiguous().numpy().tobytes()).hexdigest()}\\n')\n")
    (dst / "reference.py").write_text(reference)
    counted = load_task(dst)
    pool = WorkerPool("cpu", 1)  # one judge: its cache serves every request
    try:
        first = evaluate(counted, BASELINE, device="cpu", pool=pool, compare={"baseline": BASELINE})
        assert first.status == "verified", first.error
        calls = log.read_text().splitlines()
        assert calls and len(calls) == len(set(calls))  # once per workload x seed, comparators included
        mutating = BASELINE.replace("    return out\n", "    x.fill_(0.0)\n    return out\n")
        mutated = evaluate(counted, mutating, device="cpu", pool=pool, seed=first.seed)
        assert mutated.status == "input_mutated", mutated.error
        drawn = log.read_text().splitlines()
        assert drawn == calls  # its seed replayed: every input and output from the judge's cache
        again = evaluate(counted, BASELINE, device="cpu", pool=pool, compare={"baseline": BASELINE}, seed=first.seed)
        assert again.status == "verified", again.error  # the zeroed inputs were the mutating kernel's clones
        assert again.seed == first.seed and log.read_text().splitlines() == drawn  # the replay ran no reference
        other = evaluate(counted, BASELINE, device="cpu", pool=pool)
        assert other.seed != first.seed and not set(log.read_text().splitlines()[len(drawn):]) & set(calls)
    finally:
        pool.close()


def test_torch_compile_of_a_reference_that_allocates_is_timed_beside_the_kernel():
    # gqa_paged_decode's reference fills a torch.empty_like buffer; the sandbox had poisoned
    # that allocation in the comparator's calls too, Dynamo traced the poison into the graph
    # and Inductor refused it, so a run on the H100 had no torch.compile figure for this task.
    # Poisoned allocations are for calls whose outputs are checked, the candidate's.
    from accelopt.tools.harness.reference_kernel import torch_comparators
    from tests.conftest import TASKS

    gqa = load_task(TASKS / "gqa_paged_decode")
    result = evaluate(gqa, gqa.baseline_source, device="cpu", compare=torch_comparators(gqa), rounds=1)
    assert result.status == "verified", result.error
    assert set(result.versus) == {"torch_compile", "eager"}
    assert set(result.compare["torch_compile"]) == set(result.workloads)


def test_the_tasks_own_reference_runs_unprofiled_and_a_candidate_is_traced(task):
    """A trusted request (the reference as the baseline of a from-scratch run) is torch code by
    design and nothing checks what it runs, so none of its calls is profiled (a profile costs time
    that nothing would read). A candidate's calls still are."""
    from accelopt.tools.harness.reference_kernel import reference_source

    reference = evaluate(task, reference_source(task), device="cpu", trusted=True, rounds=1)
    assert reference.status == "verified", reference.error
    assert reference.kernels_seen == []  # profiled, its torch ops would be listed (aten::...)
    candidate = evaluate(task, task.baseline_source, device="cpu", rounds=1)
    assert candidate.status == "verified", candidate.error
    assert any("traced" in line for line in candidate.evidence) and candidate.kernels_seen


def test_a_worker_survives_crashes_and_hangs(task):
    """A crash and a hang each cost one candidate; the next candidate is measured normally."""
    assert evaluate(task, BASELINE.replace("return out", "import os; os.abort()"), device="cpu").status == "crashed"
    hang = BASELINE.replace("return out", "import time; time.sleep(600)\n    return out")
    assert evaluate(task, hang, device="cpu", timeout_s=5).status == "timeout"
    assert evaluate(task, BASELINE, device="cpu").status == "verified"


def test_hang_is_killed_at_the_timeout(task):
    source = BASELINE.replace("return out", "import time; time.sleep(600)\n    return out")
    result = evaluate(task, source, device="cpu", timeout_s=5)
    assert result.status == "timeout" and result.eval_s < 30
    # where the time went: the step that ran out, and the steps before it
    assert "limit 5 s; ran out in step 'checks' after" in result.error, result.error
    assert "finished steps: load " in result.error


def test_worker_env_hides_api_keys(task, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    source = BASELINE.replace("return out", "import os\n    assert 'OPENAI_API_KEY' not in os.environ\n    return out")
    assert evaluate(task, source, device="cpu").status == "verified"


def test_results_over_10x_are_reverified_on_fresh_inputs_and_flagged(task):
    from tests.scripted import SLOW

    # Against a 128x-redundant "baseline", the real baseline looks >10x faster (64x gave 9.3x on a loaded
    # 2-core machine: the interpreter's per-call cost does not scale with the programs).
    result = evaluate(task, BASELINE, device="cpu", compare={"baseline": SLOW.replace("(n_rows, 16)", "(n_rows, 128)")})
    assert result.status == "verified" and result.versus["baseline"].speedup > 10
    # no external profiler audits interpreter runs, so the flag keeps it out of the beam
    assert result.flags == ["over_10x_reverified", "unaudited"]


def test_a_kernel_that_stops_working_once_checked_is_caught_when_timed(task):
    # Correct for the 13 calls before timing (2 workloads x 3 seeds, the repeated call, 4 stress
    # draws, the ghost replay and the traced call), then replays its last output, so the timed calls
    # do no work. The timed calls' own outputs are checked.
    source = BASELINE.replace("def run(x):\n", "def run(x):\n    run.calls = getattr(run, 'calls', 0) + 1\n"
                                               "    if run.calls > 13:\n        return run.memo\n")
    source = source.replace("    return out\n", "    run.memo = out\n    return out\n")
    result = evaluate(task, source, device="cpu")
    assert result.status == "cheat_suspected" and "not when timed" in result.error, result.error


def test_a_kernel_that_stops_working_after_timing_is_caught(task):
    # Honest through the timed calls (13 before timing + 2 workloads x 2 rounds x 3 reps), then
    # replays: the check after timing, on inputs never seen, must catch it.
    source = BASELINE.replace("def run(x):\n", "def run(x):\n    run.calls = getattr(run, 'calls', 0) + 1\n"
                                               "    if run.calls > 25:\n        return run.memo\n")
    source = source.replace("    return out\n", "    run.memo = out\n    return out\n")
    result = evaluate(task, source, device="cpu")
    assert result.status == "cheat_suspected" and "correct before timing but not after it" in result.error, \
        result.error


def test_judges_and_sandboxes_die_with_a_run_killed_alone(task):
    """kill -9 of the run's process only (not its group): the judge sees its parent go and ends
    itself, and its sandboxes die with it (PR_SET_PDEATHSIG), a hanging kernel included."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT, descendants, still_alive

    hang = BASELINE.replace("return out", "import time; time.sleep(600)\n    return out")
    script = ("import sys; from tools.harness.runner import evaluate; from tools.task import load_task; "
              "evaluate(load_task(sys.argv[1]), open(sys.argv[2]).read(), device='cpu', timeout_s=600)")
    src = Path(task.root).parent / "hang.py"
    src.write_text(hang)
    proc = subprocess.Popen([sys.executable, "-c", script, task.root, str(src)], cwd=ROOT, start_new_session=True)
    deadline = time.time() + 120
    while len(under := descendants(proc.pid)) < 4:  # a judge and its sandboxes (in their namespaces)
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    time.sleep(3)  # the hanging call is under way
    under = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not still_alive(under, within_s=15)


def test_index_setup_in_host_code_is_not_compute(task):
    # Real FlashInfer-Bench solutions build segment offsets with cumsum/searchsorted before their
    # launch; that bookkeeping is not the task's compute and must not be rejected.
    source = BASELINE.replace("    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)\n"
                              "    starts = torch.cumsum(torch.full((n_rows,), n_cols), 0)\n"
                              "    _ = torch.searchsorted(starts, starts)\n")
    result = evaluate(task, source, device="cpu", seeds=1, rounds=1)
    assert result.status == "verified", result.error

