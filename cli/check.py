"""`accelopt check TASK_DIR KERNEL.py [--against OTHER.py] [--json]`: judge one kernel as a
user would, through the same harness as a run. `accelopt check TASKS/ SOLUTIONS/`: every task's
solution, and fast_p over the suite (evals/reporting/check_suite.py). Exit 0 verified, 1 rejected, 2 bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated as Opt  # an import alias: mypy takes `Opt = Annotated` for a variable

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelopt.cli import options as o
from accelopt.cli.memory import fail
from accelopt.cli.options import DeviceName, device_refusal

if TYPE_CHECKING:
    from accelopt.evals.reporting.check_suite import SuiteVerdict
    from accelopt.tools.harness.check_kernel import Startup
    from accelopt.tools.harness.reference_kernel import CompileMode
    from accelopt.tools.harness.result import EvalResult
    from accelopt.tools.task import Task

# Why the judge's timing rounds stopped (result.RoundsRun.stopped), in words.
ROUNDS_STOPPED = {"decided": "every comparison decided", "cap": "the cap, some comparison undecided",
                  "stalled": "more rounds no longer narrowed an undecided comparison",
                  "interpreter": "the interpreter's fixed count", "no_comparators": "nothing to compare",
                  "time_limit": "the evaluation's time limit"}
COMPARATOR_NAMES = {"eager": "eager PyTorch", "torch_compile": "torch.compile"}


def check(
    task_dir: Opt[Path, typer.Argument(help="Task directory (task.json, reference.py, baseline.py), or a folder of "
                                            "task directories to check a folder of solutions against")],
    kernel: Opt[Path, typer.Argument(help="The kernel module to judge (its entry point is the task's; for a "
                                          "task imported from KernelBench, a solution defining ModelNew), or a "
                                          "folder of solutions (<task>.py, or KernelBench's "
                                          "level_<L>_problem_<P>_sample_<S>_kernel.py)")],
    against: Opt[Path | None, typer.Option(help="Time against this kernel instead of the task's baseline")] = None,
    versus_torch: Opt[bool, typer.Option(
        "--versus-torch", help="Also time eager PyTorch and torch.compile of the reference in the same rounds "
                               "(the comparators when the task has no baseline and no --against is given)")] = False,
    compile_mode: o.CompileMode = None,
    sample: Opt[int, typer.Option(help="Folder of KernelBench solutions: which sample of each problem")] = 0,
    device: Opt[DeviceName, typer.Option(help="auto, cuda (refused where no GPU is visible), or cpu (Triton "
                                               "interpreter: correctness, no GPU times)")] = "auto",
    timeout: Opt[float, typer.Option(callback=o.checked, help="Evaluation limit in seconds, more than 0")] = 300.0,
    as_json: Opt[bool, typer.Option("--json", help="Print the whole result as one JSON object")] = False,
    replay: Opt[int | None, typer.Option(min=0, max=2**31 - 1, metavar="SEED",
                                         help="Draw the inputs of an earlier verdict again: the `seed` it printed "
                                              "(each check draws a fresh one by default)")] = None,
) -> None:
    """Judge one kernel: verdict and reasons, static findings, per-workload times with spread,
    speedup against the baseline (or --against, or the PyTorch reference: eager and torch.compile),
    % of peak. Given two folders, judge each task's solution and report fast_p over the suite."""
    began = time.monotonic()
    from accelopt.tools.harness.check_kernel import Startup, process_age_s, verdict_record
    from accelopt.tools.task import TaskError, load_task

    # the seconds before the judge's first step, from this process's own start (its imports)
    startup = Startup(process=process_age_s(), began=began)

    refusal = device_refusal(device)
    if refusal:
        fail(refusal)
    mode = compile_mode or "default"
    if task_dir.is_dir() and not (task_dir / "task.json").is_file() and kernel.is_dir():
        if against is not None:
            fail("--against judges one kernel: give a task directory and a kernel file")
        check_suite(task_dir, kernel, sample, device, timeout, as_json, mode)
        return
    try:
        task = load_task(task_dir)
    except TaskError as e:
        fail(str(e))
    for path in (kernel, against):
        if path is not None and not path.is_file():
            fail(f"{path}: no such file")
    try:
        # naming torch.compile's mode asks for the comparison with it
        result = judge(task, kernel, against, versus_torch or compile_mode is not None, device, timeout, mode,
                       startup=startup, seed=replay)
    except TaskError as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps(verdict_record(result, mode, startup)))
    else:
        show(result, kernel, mode, startup)
    raise typer.Exit(0 if result.ok else 1)


def judge(task: Task, kernel: Path, against: Path | None, versus_torch: bool, device: str,
          timeout: float, compile_mode: CompileMode = "default", startup: Startup | None = None,
          seed: int | None = None) -> EvalResult:
    """The kernel's evaluation (tools/harness/check_kernel.judge, which the served `check` graph
    calls too). TaskError: the task cannot run here, or a source is not a kernel of this task."""
    from accelopt.tools.harness.check_kernel import judge as judged

    return judged(task, kernel, against, versus_torch, device, timeout, compile_mode, startup, seed=seed)


def check_suite(tasks_dir: Path, solutions_dir: Path, sample: int, device: str, timeout: float,
                as_json: bool, compile_mode: CompileMode = "default") -> None:
    from accelopt.evals.reporting.check_suite import SolutionVerdict, pair_solutions, suite_verdict, verdict_of
    from accelopt.tools.task import TaskError

    try:
        pairings = pair_solutions(tasks_dir, solutions_dir, sample)
    except TaskError as e:
        fail(str(e))
    console = Console(stderr=as_json)
    results = []
    for n, pairing in enumerate(pairings, 1):
        if pairing.solution is None:
            results.append(verdict_of(pairing.task, None, None))
            continue
        console.print(f"[{n}/{len(pairings)}] {pairing.task.name}: {pairing.solution.name}", markup=False,
                      highlight=False)
        try:
            result = judge(pairing.task, pairing.solution, None, True, device, timeout, compile_mode)
        except TaskError as e:  # this task or file, not the suite: said on its line
            results.append(SolutionVerdict(task=pairing.task.name, solution=str(pairing.solution),
                                           status="refused", error=str(e)))
            continue
        results.append(verdict_of(pairing.task, pairing.solution, result))
    suite = suite_verdict(results).model_copy(update={"torch_compile_mode": compile_mode})
    if as_json:
        typer.echo(suite.model_dump_json())
    else:
        show_suite(suite, console, compile_mode)
    raise typer.Exit(0 if suite.correct == suite.tasks else 1)


def show_suite(suite: SuiteVerdict, console: Console, compile_mode: str = "default") -> None:
    from accelopt.evals.reporting.check_suite import judged, missing_line
    from accelopt.tools.harness.reference_kernel import mode_note
    from accelopt.tools.harness.result import TIMER_NAMES

    table = Table(title=f"{suite.correct} of {suite.tasks} correct"
                  + (f" ({TIMER_NAMES.get(suite.timer, suite.timer)})" if suite.timer else ""))
    for column in ("task", "solution", "status", "vs eager", "vs torch.compile" + mode_note(compile_mode)):
        table.add_column(column, overflow="fold")
    for r in judged(suite):  # natural order (1, 2, ..., 10, ..., 100); tasks without a solution below, on one line
        speed = [f"{r.speedup[k]:.2f}x ({r.interval[k][0]:.2f}-{r.interval[k][1]:.2f})" if k in r.speedup else "-"
                 for k in ("eager", "torch_compile")]
        table.add_row(r.task, Path(r.solution).name if r.solution else "-", r.status, *speed)
    console.print(table)
    missing = missing_line(suite)
    if missing:
        console.print(missing, markup=False, highlight=False)
    for name, shares in suite.fast_p.items():
        known = ", ".join(f"fast_{p.rstrip('0').rstrip('.') or '0'} {v:.0%}" for p, v in shares.items() if v is not None)
        mode = mode_note(compile_mode) if name == "torch_compile" else ""
        console.print(f"  vs {COMPARATOR_NAMES[name]}{mode}: {known}", markup=False, highlight=False)
    if suite.note:
        console.print(f"  {suite.note}", markup=False, highlight=False)


def show(result: EvalResult, kernel: Path, compile_mode: str = "default", startup: Startup | None = None) -> None:
    console = Console()
    style = "bold green" if result.ok else "bold red"
    # one line however long: the terminal folds it, a copied path stays whole (rich would break it)
    console.print(f"[{style}]{result.status}[/]  {kernel}  on {result.device_name or result.device}", soft_wrap=True)
    if result.error:
        console.print(result.error, markup=False, highlight=False)
    for line in result.evidence:
        say(console, f"  evidence: {line}")
    for f in result.findings:
        where = f" line {f.line}" if f.line else ""
        say(console, f"  finding ({f.severity}{where}): {f.message}")
    if result.workloads:
        interp = result.timer == "interpreter_wall"
        rows = [[name, f"{t.median_us:.1f}", f"{t.iqr_us:.1f}", t.metric,
                 f"{t.kernel_us:.1f}" if t.kernel_us is not None else "-",
                 f"{t.event_us:.1f}" if t.event_us is not None else "-",
                 f"{t.pct_peak:.1f}" if t.pct_peak is not None else "-"] for name, t in result.workloads.items()]
        table, unmeasured = times_table("times" + (" (CPU interpreter wall clock: not GPU performance)" if interp
                                                   else ""), TIMES_COLUMNS, rows, console.width)
        console.print(table)
        if unmeasured:
            say(console, f"  not measured here: {', '.join(unmeasured)}")
        for name, t in result.workloads.items():
            if t.disagreement:
                say(console, f"  {name}: the figures disagree: {t.disagreement}")
    from accelopt.tools.harness.reference_kernel import mode_note
    from accelopt.tools.harness.result import interval_label

    if result.rounds is not None:
        say(console, f"  timing rounds: {result.rounds.ran} ({ROUNDS_STOPPED[result.rounds.stopped]})")
    for name, vs in result.versus.items():
        v = result.verdicts.get(name)
        if result.timer == "interpreter_wall":  # compare_rounds decides nothing there
            verdict = "no verdict: the CPU interpreter cannot tell faster from slower"
        elif v is not None:  # the span's verdict, or kernel-only time's where the calls are host-dominated
            verdict = v.word + (" on kernel-only time" if v.basis == "kernel_only" else "")
            verdict += f" (noise floor {vs.noise_floor:.0%})" if vs.noise_floor else ""
        else:
            verdict = "faster" if vs.faster else "slower" if vs.slower else "within noise"
            verdict += f" (noise floor {vs.noise_floor:.0%})" if vs.noise_floor else ""
        label = name + (mode_note(compile_mode) if name == "torch_compile" else "")
        if v is not None and v.basis != "interpreter" and v.rounds_low is not None:
            # the interval across evaluations first: it is what another evaluation's figure falls in
            figure = (f"{v.speedup:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}] across evaluations "
                      f"({interval_label(vs.rounds)}: {v.rounds_low:.3f}-{v.rounds_high:.3f})")
        else:
            figure = f"{vs.speedup:.3f}x ({interval_label(vs.rounds)}: {vs.ci_low:.3f}-{vs.ci_high:.3f})"
        say(console, f"  vs {label}: {figure}: {verdict}")
        if v is not None and v.basis != "interpreter" and (v.basis == "kernel_only" or v.word == "undecided"
                                                           or name in result.versus_kernel):
            say(console, f"    why: {v.reason}")
    for name, why in result.void.items():
        say(console, f"  vs {name}: void: {why}")
    if result.audit is not None:
        say(console, f"  audit ({result.audit.tool}): {result.audit.note}")
    if result.seed is not None:  # `--replay SEED` draws the same inputs again
        say(console, f"  seed: {result.seed}")
    if result.phases_s:
        steps = ", ".join(f"{name} {s:.1f}" for name, s in result.phases_s.items())
        say(console, f"  seconds: {steps} (of {result.eval_s:.1f} in all)")
    if startup is not None:
        from accelopt.tools.harness.check_kernel import startup_line

        say(console, f"  {startup_line(startup)}")
    if result.flags:
        say(console, f"  flags: {', '.join(result.flags)}")


# `check`'s times table: its headers wrap at their spaces (`kernel-only` over `µs`), never inside a word.
TIMES_COLUMNS = ("workload", "median µs", "IQR µs", "metric", "kernel-only µs", "events µs", "% peak")
_BY_DEVICE = ("kernel-only µs", "events µs", "% peak")  # GPU figures: none on the CPU interpreter


def times_table(title: str, headers: tuple[str, ...], rows: list[list[str]], width: int) -> tuple[Table, list[str]]:
    """The table, each column as wide as its longest word at least (so a header or a cell wraps at its
    spaces, never inside a word: `interpreter_wall`, `kernel-only` stay whole), the rest of the width
    shared up to each column's whole text. Where even that is wider than `width`, the GPU figures no
    row has (`-` in every row: the CPU interpreter) are left out, named in the second value. Only a
    word wider than the whole screen still folds."""
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    unmeasured: list[str] = []

    def longest_word(column: list[str]) -> int:
        return max(cell_len(w) for text in column for w in text.split() or [""])

    # the narrowest table: words whole, padding 1 each side, borders
    if sum(map(longest_word, columns)) + 3 * len(columns) + 1 > width:
        unmeasured = [c[0] for c in columns if c[0] in _BY_DEVICE and all(v == "-" for v in c[1:])]
        columns = [c for c in columns if c[0] not in unmeasured]
    words = [longest_word(c) for c in columns]
    whole = [max(cell_len(text) for text in c) for c in columns]
    spare = width - (sum(words) + 3 * len(columns) + 1)
    widths = list(words)
    if spare >= 0:  # widen the columns toward their whole text, the narrowest need first
        for i in sorted(range(len(columns)), key=lambda i: whole[i] - words[i]):
            grow = min(whole[i] - widths[i], spare)
            widths[i] += grow
            spare -= grow
    table = Table(title=title)
    for column, w in zip(columns, widths):
        # a fixed width the words fit in; fold only a word wider than the screen (never an ellipsis)
        table.add_column(column[0], overflow="fold", width=w if spare >= 0 else None)
    for r in range(len(rows)):
        table.add_row(*(c[r + 1] for c in columns))
    return table, unmeasured


def say(console: Console, line: str) -> None:
    """One line of `check`'s report, wrapped at words to the console's width with a hanging indent:
    a continuation starts under the text after the line's label (`  evidence: `), or 4 columns in
    where the label is long; never back at column 0."""
    lead = len(line) - len(line.lstrip(" "))
    label = line.find(": ", lead)
    hang = label + 2 if 0 < label <= 24 else lead + 4
    from accelopt.graph.progress import hanging  # after the verdict: not on the CLI's start

    console.print(hanging(Text(line), console, hang), highlight=False)
