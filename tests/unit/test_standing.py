"""The standing node's answers where no GPU timing can be made: every path says why."""

from accelopt.nodes import standing as node
from accelopt.nodes.context import RunContext

GPU_BEST = {"id": "i1.m0.p0.k0", "timer": "cuda_event", "source": "def run(x):\n    return x\n"}


def test_turned_off_is_said_not_measured():
    got = node.versus_torch_compile({"task_dir": "unused"}, GPU_BEST, RunContext(versus_torch_compile=False))
    assert got == {"not_measured": "turned off (versus_torch_compile = false)"}


def test_a_failing_comparison_never_fails_the_finished_run(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("no judge could start")

    monkeypatch.setattr(node, "measure_against_torch", broken)
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    got = node.versus_torch_compile({"task_dir": "t", "run_dir": str(tmp_path)}, GPU_BEST, RunContext())
    assert got == {"not_measured": "the timing with torch.compile could not run: RuntimeError: no judge could start"}
    assert not (tmp_path / "torch_compile.json").exists()


def test_a_comparator_that_failed_is_reported_with_its_status(monkeypatch, tmp_path):
    record = {"status": "compile_error", "error": "Inductor could not compile the reference\nmore", "device_name": "H100"}
    monkeypatch.setattr(node, "measure_against_torch", lambda *a, **k: record)
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    got = node.versus_torch_compile({"task_dir": "t", "run_dir": str(tmp_path)}, GPU_BEST, RunContext())
    assert got == {"not_measured": "the timing with torch.compile failed (compile_error): Inductor could not "
                                   "compile the reference"}
    assert (tmp_path / "torch_compile.json").is_file()  # the report shows the failure too


def test_a_comparator_that_raised_is_reported_by_its_exception_not_the_tracebacks_top(monkeypatch, tmp_path):
    error = ("while timing (comparator 'torch_compile', not the kernel under test): warm-up before timing:\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 1, in run\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB")
    monkeypatch.setattr(node, "measure_against_torch", lambda *a, **k: {"status": "runtime_error", "error": error})
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    got = node.versus_torch_compile({"task_dir": "t", "run_dir": str(tmp_path)}, GPU_BEST, RunContext())
    assert got["not_measured"].endswith("(runtime_error): torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                        "allocate 6.00 GiB")


def test_the_standing_says_which_torch_compile_mode_it_was_timed_against(monkeypatch, tmp_path):
    seen = {}

    def measured(task, source, ctx, run_dir):
        seen["mode"] = ctx.torch_compile_mode
        return {"status": "verified", "device_name": "H100", "torch_compile_mode": ctx.torch_compile_mode,
                "versus": {"torch_compile": {"speedup": 0.97, "ci_low": 0.96, "ci_high": 0.98, "rounds": 30,
                                             "faster": False, "slower": True},
                           "eager": {"speedup": 2.0}}}

    monkeypatch.setattr(node, "measure_against_torch", measured)
    monkeypatch.setattr(node, "task_of", lambda task_dir: None)
    ctx = RunContext(torch_compile_mode="max-autotune-no-cudagraphs")
    got = node.versus_torch_compile({"task_dir": "t", "run_dir": str(tmp_path)}, GPU_BEST, ctx)
    assert seen["mode"] == "max-autotune-no-cudagraphs"
    assert got["mode"] == "max-autotune-no-cudagraphs" and got["verdict"] == "slower"


def test_a_standing_recorded_before_modes_reads_as_default():
    from accelopt.tools.run_record import TorchCompileStanding

    old = TorchCompileStanding.model_validate({"speedup": 1.1, "verdict": "faster"})
    assert old.mode == "default"


def test_the_console_line_names_the_mode_it_was_timed_against():
    from accelopt.cli.app import _versus_torch_compile
    from accelopt.tools.run_record import TorchCompileStanding

    figure = {"speedup": 1.029, "ci_low": 1.025, "ci_high": 1.037, "rounds": 3, "verdict": "faster"}
    line = _versus_torch_compile(TorchCompileStanding.model_validate({**figure, "mode": "max-autotune-no-cudagraphs"}))
    assert line == "1.029x [1.025, 1.037] over 3 rounds (mode max-autotune-no-cudagraphs): faster"
    assert "(mode default)" in _versus_torch_compile(TorchCompileStanding.model_validate(figure))
