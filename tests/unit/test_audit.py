"""The ncu audit as one launch for all its workloads, read without a GPU.

tests/fixtures/ncu_raw_workloads.csv is hand-written in the layout of `ncu --csv --page raw
--print-units base --metrics gpu__time_duration.sum` (the audit's command line, with `--nvtx
--nvtx-include accelopt_profile/` keeping only the profiled calls): ncu's progress lines, a
header, a units row, one row per kernel in launch order. Each workload's profiled call is
preceded by the run's marker kernel (here accelopt_mark_5f3a9c0d1e2b; a random suffix in a real
run), so the "Kernel Name" column alone tells the calls apart. Real ncu output is exercised by
tests/gpu/test_gpu.py.
"""

import json
import subprocess
from pathlib import Path

from accelopt.tools.harness import audit as audit_mod
from accelopt.tools.harness import kernel_profile
from accelopt.tools.harness.kernel_profile import parse_ncu_csv, split_workloads
from accelopt.tools.harness.result import EvalResult, WorkloadTiming
from accelopt.tools.task import load_task
from tests.conftest import FIXTURES, TASKS

MARKER = "accelopt_mark_5f3a9c0d1e2b"
WORKLOADS = ["M4096_N4096", "M1024_N32000", "M16384_N1024"]
NCU_US = {"M4096_N4096": 46.88, "M1024_N32000": 88.352, "M16384_N1024": 47.264}


def _fixture() -> str:
    return (FIXTURES / "ncu_raw_workloads.csv").read_text()


def _result(kernel_us: dict[str, float]) -> EvalResult:
    result = EvalResult(status="verified", device="cuda")
    result.workloads = {w: WorkloadTiming(median_us=us, iqr_us=0.0, samples=5, kernel_us=us)
                        for w, us in kernel_us.items()}
    return result


def test_one_ncu_run_is_split_into_workloads_at_the_marker():
    run = split_workloads(parse_ncu_csv(_fixture()), MARKER, WORKLOADS)
    assert run.error is None and list(run.kernels) == WORKLOADS
    for workload, kernels in run.kernels.items():
        assert [k["name"] for k in kernels] == ["softmax_kernel"]  # the marker is not the candidate's
        assert abs(kernels[0]["time_us"] - NCU_US[workload]) < 1e-9  # "46,880" nanoseconds
    # a workload that ncu has no call of, and a call that ran no kernel, are not guessed at
    assert "2 profiled calls for 3 workloads" in split_workloads(
        parse_ncu_csv(_fixture().rsplit("\n", 3)[0]), MARKER, WORKLOADS).error
    no_kernel = "\n".join(line for line in _fixture().splitlines() if not line.startswith('"3",'))
    assert "no kernel of the call on M1024_N32000" in split_workloads(parse_ncu_csv(no_kernel), MARKER,
                                                                      WORKLOADS).error


def test_csv_lines_the_program_printed_before_ncus_report_are_not_read():
    forged = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","softmax_kernel","1"\n'
    assert [k["name"] for k in parse_ncu_csv(forged + _fixture())].count("softmax_kernel") == 3


def test_the_audit_decides_per_workload_on_one_run():
    task = load_task(TASKS / "softmax")
    calls = split_workloads(parse_ncu_csv(_fixture()), MARKER, WORKLOADS).kernels
    same = audit_mod.verdict(task.baseline_source, _result({w: us * 0.95 for w, us in NCU_US.items()}), calls)
    assert same.agreed is True and same.kernels == ["softmax_kernel"]
    assert same.measured_us == NCU_US and "within 20%" in same.note
    # one workload off beyond the tolerance rejects, and says which
    off = audit_mod.verdict(task.baseline_source, _result({**NCU_US, "M1024_N32000": 40.0}), calls)
    assert off.agreed is False and "on M1024_N32000 ncu measured 88.4 µs" in off.note
    assert "M4096_N4096" not in off.note
    # a harness slower than ncu beyond the tolerance hides nothing: agreed, with both figures said
    # (an honest GEMM seed on the H100: 32.0 µs after the harness's L2 flush, 24.3 under ncu)
    slow = audit_mod.verdict(task.baseline_source, _result({**NCU_US, "M1024_N32000": 120.0}), calls)
    assert slow.agreed is True and "ncu measured less than the harness (M1024_N32000 88.4 against 120.0 µs)" in slow.note
    # a torch kernel in one workload's call is foreign work
    foreign = {**calls, "M16384_N1024": calls["M16384_N1024"] + [
        {"name": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "time_us": 1.0}]}
    rejected = audit_mod.verdict(task.baseline_source, _result(NCU_US), foreign)
    assert rejected.agreed is False and "not Triton kernels of the source on M16384_N1024" in rejected.note


def test_each_launch_of_a_call_widens_the_absolute_tolerance_up_to_three():
    """The split-KV decode on FIB's one sequence of 54 tokens (H100): its parts and combine kernels
    took 13.0 µs under ncu, 8.2 µs in the harness; one kernel that far off is still rejected, and
    ten launches widen it no more than three do."""
    source = load_task(TASKS / "softmax").baseline_source

    def calls(*times: float) -> dict[str, list[dict]]:
        return {"one": [{"name": "softmax_kernel", "time_us": t} for t in times]}

    def agreed(*times: float, harness: float) -> bool:
        return audit_mod.verdict(source, _result({"one": harness}), calls(*times)).agreed

    assert agreed(6.5, 6.5, harness=8.2) is True            # two launches: 4.8 µs over, within 8
    assert agreed(13.0, harness=8.2) is False                # one launch: 4.8 µs over 4, and 59% over
    assert agreed(*[2.2] * 10, harness=8.2) is False         # ten launches: 13.8 µs over, past 12
    assert agreed(*[1.9] * 10, harness=8.2) is True          # 10.8 µs over, within 12


def test_an_autotuned_kernel_is_rejected_only_past_three_times_the_harness():
    source = "import triton\n\n\n@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef softmax_kernel(x):\n    pass\n"
    calls = {"M1024_N32000": [{"name": "softmax_kernel", "time_us": 100.0}]}
    assert audit_mod.verdict(source, _result({"M1024_N32000": 40.0}), calls).agreed is True   # 2.5x: another config
    assert audit_mod.verdict(source, _result({"M1024_N32000": 500.0}), calls).agreed is True  # a faster config here
    far = audit_mod.verdict(source, _result({"M1024_N32000": 30.0}), calls)
    assert far.agreed is False and "ncu measured 100.0 µs" in far.note


class _FakeProcess:
    """The profiling process as Popen shows it: answers `communicate` once the go file is there."""

    def __init__(self, cmd, cwd, answer, launches, returncode, stderr):
        self.cmd, self.cwd, self.answer, self.launches = cmd, cwd, answer, launches
        self.returncode, self.stderr, self.pid = None, stderr, 0
        self.code = returncode

    def communicate(self, timeout=None):
        if self.returncode is not None:
            return "", ""
        if not (Path(self.cwd) / "go").exists():  # still waiting to go: killed (cancel)
            self.returncode = -9
            return "", ""
        request = json.loads(Path(self.cmd[-1]).read_text())
        script = Path(self.cmd[-2]).read_text()
        self.launches.append({"cmd": self.cmd, "timeout": timeout, "request": request, "script": script})
        self.returncode = self.code
        return self.answer(request, timeout), self.stderr

    def poll(self):
        return self.returncode

    def kill(self):
        self.returncode = -9


def _fake_ncu(monkeypatch, stdout_of, returncode: int = 0, stderr: str = "") -> list[dict]:
    """ncu on the PATH, its launch answered with `stdout_of(request)`; returns the launches seen."""
    launches: list[dict] = []
    which = kernel_profile.shutil.which

    def launch(cmd, *, cwd, env):
        return _FakeProcess(cmd, cwd, lambda req, _timeout: stdout_of(req), launches, returncode, stderr)

    monkeypatch.setattr(kernel_profile.shutil, "which", lambda name: "/usr/bin/ncu" if name == "ncu" else which(name))
    monkeypatch.setattr(kernel_profile.confine, "process_prefix", lambda _root, _readable=(): [])
    monkeypatch.setattr(kernel_profile, "_launch", launch)
    monkeypatch.setattr(kernel_profile.os, "killpg", lambda pid, sig: None)
    return launches


def test_the_audit_is_one_ncu_launch_for_all_its_workloads(monkeypatch):
    task = load_task(TASKS / "softmax")
    launches = _fake_ncu(monkeypatch, lambda req: _fixture().replace(MARKER, req["marker"]))
    report = audit_mod.audit(task, task.baseline_source, _result(NCU_US), timeout_s=123.0)
    assert report.tool == "ncu" and report.agreed is True, report.note
    assert report.measured_us == NCU_US
    assert len(launches) == 1 and launches[0]["timeout"] == 123.0  # the whole launch, not per workload
    launch = launches[0]
    assert [w["name"] for w in launch["request"]["workloads"]] == WORKLOADS
    cmd = " ".join(launch["cmd"][:-2])
    assert "--nvtx-include accelopt_profile/" in cmd and "--print-units base" in cmd
    # the kernel's time, and the counters of the planner's profile, from the same launch
    assert "--metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed," in cmd
    marker = launch["request"]["marker"]
    assert marker.startswith("accelopt_mark_") and marker != MARKER and f"def {marker}(ptr)" in launch["script"]
    # every workload is warmed up before the first profiled range opens
    assert launch["script"].index("run(*inputs(w))") < launch["script"].index("range_push")


def test_an_ncu_launch_that_fails_twice_leaves_the_winner_unaudited_with_the_reason(monkeypatch):
    task = load_task(TASKS / "softmax")
    launches = _fake_ncu(monkeypatch, lambda req: _fixture().replace(MARKER, req["marker"]).rsplit("\n", 3)[0],
                         returncode=1, stderr="Traceback...\nRuntimeError: CUDA error: an illegal memory access")
    report = audit_mod.audit(task, task.baseline_source, _result(NCU_US))
    assert report.tool == "ncu" and report.agreed is None and len(launches) == 2  # once more, then unaudited
    assert "exited with 1: RuntimeError: CUDA error" in report.note and report.note.endswith("not audited")
    assert "again in a fresh process" in report.note

    hangs: list[dict] = []

    def hang(req, timeout):
        raise subprocess.TimeoutExpired("ncu", timeout)

    monkeypatch.setattr(kernel_profile, "_launch", lambda cmd, *, cwd, env: _FakeProcess(cmd, cwd, hang, hangs, 0, ""))
    report = audit_mod.audit(task, task.baseline_source, _result(NCU_US), timeout_s=60.0)
    assert report.agreed is None and "ran past 60 s" in report.note
    assert len(hangs) == 1  # a profile that ran out of time is not run a second time


def test_an_ncu_launch_that_fails_once_is_audited_in_a_fresh_process(monkeypatch):
    """On an H100, one of an iteration's two winners came back unaudited (and so out of the beam)
    while the same source audited in the next run: one failed profile decides nothing."""
    task = load_task(TASKS / "softmax")
    answers = iter([("", 1), (None, 0)])
    launches: list[dict] = []

    def launch(cmd, *, cwd, env):
        broken, code = next(answers)
        answer = (lambda req, _t: broken) if broken is not None else \
            (lambda req, _t: _fixture().replace(MARKER, req["marker"]))
        return _FakeProcess(cmd, cwd, answer, launches, code, "ncu: ERR_NVGPUCTRPERM" if code else "")

    _fake_ncu(monkeypatch, lambda req: "")
    monkeypatch.setattr(kernel_profile, "_launch", launch)
    report = audit_mod.audit(task, task.baseline_source, _result(NCU_US))
    assert report.agreed is True and len(launches) == 2, report.note


def test_the_planners_profile_is_one_workloads_call_without_the_marker(monkeypatch):
    task = load_task(TASKS / "softmax")
    one = _fixture().rsplit("\n", 5)[0]  # the first workload's marker and kernel
    launches = _fake_ncu(monkeypatch, lambda req: one.replace(MARKER, req["marker"]))
    prof = kernel_profile.profile_kernel(task, task.baseline_source)
    assert prof is not None and prof["tool"] == "ncu" and prof["workload"] == "M4096_N4096"
    assert [k["name"] for k in prof["kernels"]] == ["softmax_kernel"] and "softmax_kernel" in prof["summary"]
    assert [w["name"] for w in launches[0]["request"]["workloads"]] == ["M4096_N4096"]


def test_the_audit_started_ahead_runs_nothing_of_the_candidate_until_a_winner_needs_it(monkeypatch):
    task = load_task(TASKS / "softmax")
    def calls(req):  # ncu's rows for the workloads asked for: a marker and a kernel each
        lines = _fixture().replace(MARKER, req["marker"]).splitlines()
        return "\n".join(lines[:len(lines) - 2 * (len(WORKLOADS) - len(req["workloads"]))])

    launches = _fake_ncu(monkeypatch, calls)
    ahead = audit_mod.start(task, task.baseline_source, gpu="3")
    assert ahead is not None and ahead.workloads == WORKLOADS and not launches  # waiting, not yet collected
    script = (ahead.home / "profile.py").read_text()
    wait = script.index("while not os.path.exists(go)")
    # before the go file: no import of the candidate and no kernel launched (the marker only compiled)
    assert wait < script.index('load(req["source_path"]') and wait < script.index(f"{ahead.marker}[(1,)](mark)")
    assert script.index(f"{ahead.marker}.warmup(") < wait
    report = audit_mod.audit(task, task.baseline_source, _result(NCU_US), started=ahead)
    assert report.agreed is True and len(launches) == 1
    assert not ahead.home.exists()  # its folder goes with it

    # measured on other workloads than it was started for: started again, the first one ended
    other = audit_mod.start(task, task.baseline_source)
    report = audit_mod.audit(task, task.baseline_source, _result({w: NCU_US[w] for w in WORKLOADS[:2]}),
                             started=other)
    assert not other.home.exists() and len(launches) == 2 and report.agreed is True, report.note
    assert [w["name"] for w in launches[1]["request"]["workloads"]] == WORKLOADS[:2]


def test_a_carried_triton_cache_points_into_its_new_folder(tmp_path):
    from accelopt.tools.harness import triton_cache

    old = tmp_path / "sandbox-1" / "triton-cache"
    (old / "KEY").mkdir(parents=True)
    (old / "KEY" / "k.cubin").write_bytes(b"\x7fELF")
    group = {"child_paths": {"k.cubin": str(old / "KEY" / "k.cubin"), "k.json": str(old / "KEY" / "k.json")}}
    (old / "KEY" / "__grp__k.json").write_text(json.dumps(group))
    (old / "LIST").mkdir()
    (old / "LIST" / "__grp__n.json").write_text(json.dumps({"child_paths": ["n.cubin"]}))  # Triton >= 3.7
    new = tmp_path / "audit" / "triton-cache"
    assert triton_cache.copy(str(old), str(new))
    paths = json.loads((new / "KEY" / "__grp__k.json").read_text())["child_paths"]
    assert paths == {"k.cubin": str(new / "KEY" / "k.cubin"), "k.json": str(new / "KEY" / "k.json")}
    assert json.loads((new / "LIST" / "__grp__n.json").read_text()) == {"child_paths": ["n.cubin"]}
    assert json.loads((old / "KEY" / "__grp__k.json").read_text()) == group  # the source is left alone
    assert not triton_cache.copy(str(tmp_path / "missing"), str(new))
    # a file already there (a launcher a running process has mapped) is never overwritten
    running = tmp_path / "running"
    (running / "KEY").mkdir(parents=True)
    (running / "KEY" / "k.cubin").write_bytes(b"mapped")
    assert triton_cache.copy(str(old), str(running))
    assert (running / "KEY" / "k.cubin").read_bytes() == b"mapped" and (running / "KEY" / "__grp__k.json").exists()


def test_a_winners_audit_is_its_planner_profile_and_a_kernel_that_beats_nothing_is_not_profiled(monkeypatch):
    """One ncu launch audits a winner and reads the counters the planner's profile needs; a
    verified kernel that beats nothing costs no profile at all (its process, started ahead, ends
    unused)."""
    from accelopt.tools.harness import runner
    from accelopt.tools.harness.result import Comparison

    task = load_task(TASKS / "softmax")
    launches = _fake_ncu(monkeypatch, lambda req: _fixture().replace(MARKER, req["marker"]))
    plain = _result(NCU_US)
    ahead = audit_mod.start(task, task.baseline_source, gpu="2")
    assert runner._audit_winner(task, task.baseline_source, plain, None, ahead) is None and plain.audit is None
    assert not runner._wins(plain) and not launches
    ahead.cancel()
    winner = _result(NCU_US)
    winner.versus = {"baseline": Comparison(speedup=1.5, ci_low=1.4, ci_high=1.6, rounds=3, faster=True, slower=False)}
    ahead = audit_mod.start(task, task.baseline_source, gpu="2")
    seen = runner._audit_winner(task, task.baseline_source, winner, None, ahead)
    assert runner._wins(winner) and winner.audit is not None and winner.audit.agreed is True, winner.audit
    assert len(launches) == 1 and "softmax_kernel" in (runner.planner_profile(seen) or "")
    assert runner.planner_profile(seen).startswith(f"Profile of one call on workload {WORKLOADS[0]}")
    # the counters the profile's reading rests on are asked in the audit's launch
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput" in " ".join(launches[0]["cmd"])
    assert runner.planner_profile(None) is None
