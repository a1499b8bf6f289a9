"""What `accelopt show` and `accelopt runs` print: one run at a glance, and runs side by side.

Read from what a run directory holds, through the readers that already exist: `report.load_row`
(summary.json, candidates/*/result.json, the markers an eval leaves: skipped.json, stopped.json,
error.txt), run.json, candidates/ID/kernel.py, and the checkpoint (checkpoints.sqlite, opened read
only), which is the run's own state: the beam, the stop reason and the history when summary.json
is missing or behind (a run stopped at setup, one cut off mid-iteration, one still running), and
the text of the plans each kernel was written from (the state keeps one iteration's plans, so
earlier ones are read from earlier checkpoints). Nothing here writes to the run directory.

Whether a run that has not finished is still running is its lock's business (tools/rundir.py:
an flock on D/.lock, held by the live process): probing it takes a shared lock for an instant.

The outcome of a finished run is "optimized" only where its best kernel is faster than the baseline
beyond noise (TaskRow.shown_outcome); any other finished search is "finished", its verdict saying
what its best is worth. On the CPU interpreter the verdict is "interpreter": no speed claim.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from pydantic import BaseModel

from accelopt.evals.reporting.report import chain, lineage_steps, load_row, versus
from accelopt.evals.reporting.rows import OUTCOMES, TIMERS, LineageStep, Speedup, TaskRow
from accelopt.tools.best_figure import BestFigure
from accelopt.tools.candidate_record import evaluation_of, lineage_of, solution_of
from accelopt.tools.run_record import RunSummary, candidate_counts, iterations_done, load_summary
from accelopt.tools.rundir import is_run_dir, lock_holder, read_plans

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

EVAL_MARKER = "suite.json"  # an `accelopt eval` directory: one run dir per task below it

RunState = Literal["finished", "running", "interrupted", "stopped", "skipped", "failed"]
STATES: dict[str, str] = {
    "finished": "finished",
    "running": "still running",
    "interrupted": "interrupted (not finished, no process running it)",
    "stopped": "stopped before the search (setup)",
    "skipped": "skipped (could not run here)",
    "failed": "failed",
}


class NotARunDir(ValueError):
    """A path that holds no accelopt run; the message says what it is instead."""


# A speedup with the harness's interval over interleaved rounds (rows.interval_label says what
# kind: with 5 rounds or fewer, the range of the rounds); the report's record, under show's name.
Interval: TypeAlias = Speedup


class BeamMember(BaseModel):
    id: str
    iteration: int
    status: str | None
    kind: str | None = None
    vs_baseline: Interval


class Step(LineageStep):
    """One kernel on the way from the baseline to the best (the report's lineage step), with the
    plan's id and text as the run last held it."""

    plan_id: str | None = None
    plan: str | None = None        # the plan's text (the planner's, or the autotune move); None for the baseline


class RunView(BaseModel):
    """`accelopt show RUN_DIR --json`: one run."""

    run_dir: str
    task: str
    task_dir: str | None = None
    state: RunState
    state_text: str
    outcome: str                   # optimized (faster beyond noise) | finished | stopped | skipped | failed | running
    verdict: str | None = None     # the report's verdict for a finished search: faster, within noise, interpreter, ...
    outcome_text: str              # the outcome in words (for a finished search, the verdict's)
    stop_reason: str | None = None  # why the run ended (or the skip, stop or failure reason)
    held_by: str | None = None     # a running run: its lock's holder ("accelopt pid N (started ...)")
    started: str | None = None
    model: str | None = None
    device_name: str | None = None
    timer: str | None = None       # cuda_event | interpreter_wall | ...
    timer_label: str | None = None  # what the times are, in words ("CPU Triton-interpreter wall time")
    iterations_done: int = 0
    iterations_planned: int | None = None  # T
    candidates_evaluated: int = 0
    statuses: dict[str, int] = {}  # by status, as summary.json counts them (run_record.candidate_counts)
    tokens: int = 0
    cost_usd: float = 0.0
    best_id: str | None = None
    best: Interval | None = None
    # the figure the run reports for its best: every evaluation of its program pooled, confirmations too
    best_figure: BestFigure | None = None
    not_confirmed: str | None = None  # why the run's end did not confirm it
    beam: list[BeamMember] = []
    lineage: list[Step] = []       # baseline first, the best kernel (beam head) last
    diff: str | None = None        # unified diff, baseline -> best kernel ("" when the best is the baseline)
    notes: list[str] = []          # what could not be read


class RunListing(BaseModel):
    """`accelopt runs DIR --json`: one entry per run directory."""

    run_dir: str
    task: str
    started: str | None = None
    state: RunState
    outcome: str
    verdict: str | None = None
    outcome_text: str
    note: str | None = None
    iterations_done: int = 0
    iterations_planned: int | None = None
    best_id: str | None = None
    best_speedup: float | None = None
    best_interval: list[float] | None = None  # the best's figure's interval, across evaluations
    best_measurements: int | None = None      # evaluations that figure pools
    timer: str | None = None
    timer_label: str | None = None
    model: str | None = None
    cost_usd: float = 0.0


def find_runs(root: Path) -> list[Path]:
    """The run directories at root: root itself, its subfolders that are runs, and the runs of the
    `accelopt eval` directories among them (runs/eval1/TASK)."""
    if is_run_dir(root):
        return [root]
    if not root.is_dir():
        return []
    found: list[Path] = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if is_run_dir(sub):
            found.append(sub)
        elif (sub / EVAL_MARKER).is_file() or any(is_run_dir(p) for p in sub.iterdir() if p.is_dir()):
            found.extend(p for p in sorted(sub.iterdir()) if is_run_dir(p))
    return found


class Checkpoint:
    """The run's checkpoint, read only: the latest state, and plans from earlier iterations."""

    def __init__(self, run_dir: Path, meta: dict):
        from langgraph.checkpoint.sqlite import SqliteSaver

        from accelopt.graph.driver import thread_id

        self.run_dir = run_dir
        self.conn = sqlite3.connect(f"file:{run_dir / 'checkpoints.sqlite'}?mode=ro", uri=True,
                                    check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.is_setup = True  # its setup writes (WAL mode, tables); the file is only read here
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id(run_dir, meta, self.conn),
                                                        "checkpoint_ns": ""}}

    def state(self) -> dict | None:
        found = self.saver.get_tuple(self.config)
        return dict(found.checkpoint["channel_values"]) if found else None

    def plans(self, wanted: set[str]) -> dict[str, dict]:
        """The plans named in `wanted`, as the run last held them (a reviewed plan's edited text):
        plans.jsonl (record writes every iteration's), then for what it lacks (a run older than it,
        the iteration in progress) the checkpoints, newest first, until all are found."""
        found = {k: v for k, v in read_plans(self.run_dir).items() if k in wanted}
        if wanted <= set(found):
            return found
        for item in self.saver.list(self.config):
            for plan in item.checkpoint["channel_values"].get("plans") or []:
                if isinstance(plan, dict) and plan.get("id") in wanted:
                    found.setdefault(plan["id"], plan)
            if wanted <= set(found):
                break
        return found

    def close(self) -> None:
        self.conn.close()


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _model(meta: dict) -> str | None:
    ctx = meta.get("context") or {}
    if not ctx:
        return None
    roles = ctx.get("role_models") or {}
    return str(ctx.get("model") or "default") + "".join(
        f"; {role}: {spec.get('model') if isinstance(spec, dict) else spec}"
        for role, spec in sorted(roles.items()) if (spec.get("model") if isinstance(spec, dict) else spec))


class _Run:
    """What both views need: report's row, run.json, the checkpoint's latest state and the state
    the run is in."""

    def __init__(self, run_dir: Path, with_checkpoint: bool = True):
        if not is_run_dir(run_dir):
            raise NotARunDir(_not_a_run(run_dir))
        self.dir = run_dir
        self.meta = _json(run_dir / "run.json") or {}
        self.row: TaskRow = load_row(run_dir)
        self.summary: RunSummary | None = load_summary(run_dir)
        self.notes: list[str] = []
        self.checkpoint: Checkpoint | None = None
        self.ck: dict | None = None
        marker = self.row.outcome in ("skipped", "stopped", "failed")
        settled = self.summary is not None and self.summary.stop_reason is not None
        if (run_dir / "checkpoints.sqlite").is_file() and not marker and (with_checkpoint or not settled):
            try:
                self.checkpoint = Checkpoint(run_dir, self.meta)
                self.ck = self.checkpoint.state()
            except Exception as e:  # noqa: BLE001 - a damaged or foreign checkpoint: say so, show the rest
                self.notes.append(f"checkpoints.sqlite unreadable ({type(e).__name__}: {str(e)[:160]}); "
                                  "shown from summary.json and candidates/")
                self.close()
        self.held_by: str | None = None
        self.stop_reason: str | None = self.row.note if marker else None
        self.state: RunState
        if marker:
            self.state = cast(RunState, self.row.outcome)
            return
        self.stop_reason = self.ck.get("stop_reason") if self.ck is not None \
            else self.summary.stop_reason if self.summary else None
        if self.stop_reason and not self.beam_ids:
            self.state = "stopped"  # setup ended it: no baseline to start from, or a broken one
        elif self.stop_reason:
            self.state = "finished"
        else:
            self.held_by = lock_holder(run_dir)
            self.state = "running" if self.held_by else "interrupted"

    @property
    def outcome(self) -> str:
        """report's outcome as show and runs say it (TaskRow.shown_outcome: "optimized" only for a best
        faster beyond noise); a run stopped at setup or not finished says so whatever summary.json says."""
        return {"stopped": "stopped", "running": "running", "interrupted": "running"}.get(self.state,
                                                                                            self.row.shown_outcome)

    @property
    def history(self) -> list[dict] | None:
        """Its history (iteration records and planner events): the checkpoint's, else summary.json's."""
        if self.ck is not None:
            return list(self.ck.get("history") or [])
        return [h.model_dump() for h in self.summary.iterations] if self.summary else None

    @property
    def beam_ids(self) -> list[str]:
        if self.ck is not None:
            return list(self.ck.get("beam") or [])
        return list(self.summary.beam) if self.summary else []

    def usage(self) -> tuple[int, float]:
        """Tokens and $ so far: the checkpoint's ledger when it was read, else summary.json's."""
        if self.ck is None:
            return self.row.tokens, self.row.cost_usd
        from accelopt.tools.llm_spec import totals

        spent = totals(self.ck.get("usage") or [])
        return spent["input_tokens"] + spent["output_tokens"], spent["cost_usd"]

    def candidate(self, cid: str) -> dict | None:
        """candidates/ID/result.json with its kernel.py as `source`, else the checkpoint's record."""
        folder = self.dir / "candidates" / cid
        record = _json(folder / "result.json")
        if record is not None:
            record.setdefault("source", _text(folder / "kernel.py"))
            return record
        held = ((self.ck or {}).get("candidates") or {}).get(cid)
        return dict(held) if isinstance(held, dict) else None

    def close(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None


def _not_a_run(path: Path) -> str:
    if not path.exists():
        return f"{path}: no such file or directory"
    if not path.is_dir():
        return f"{path} is not a run directory (a file)"
    runs = find_runs(path)
    if runs:
        return (f"{path} is not a run directory but holds {len(runs)} run(s): list them with `accelopt runs {path}`, "
                f"or show one, e.g. `accelopt show {runs[0]}`")
    return f"{path} is not an accelopt run directory (no run.json)"


def _outcome_text(run: _Run) -> str:
    """report's words for a finished run (its best kernel's worth: faster beyond noise, within noise,
    none faster), ours for one that did not finish."""
    if run.state != "finished":
        return STATES[run.state]
    label = getattr(run.row, "label", None)  # report's TaskRow.label, where this version has it
    return str(label) if label else OUTCOMES.get(run.outcome, run.outcome)


def _common(run: _Run) -> dict[str, Any]:
    row, ctx = run.row, run.meta.get("context") or {}
    history = run.history
    done = iterations_done(history) if history is not None else row.iterations
    timer = row.timer
    if timer is None and run.ck is not None:  # no summary yet: the baseline's measurement says
        timer = ((run.ck.get("candidates") or {}).get("baseline") or {}).get("timer")
    return {"run_dir": str(run.dir), "task": row.task, "state": run.state, "outcome": run.outcome,
            "verdict": getattr(row, "verdict", None) if run.state == "finished" else None,
            "outcome_text": _outcome_text(run),
            "started": row.provenance.get("date") or run.meta.get("created"), "model": _model(run.meta),
            "timer": timer, "timer_label": TIMERS.get(timer, timer) if timer else None,
            "iterations_done": done, "iterations_planned": ctx.get("iterations")}


def list_run(run_dir: Path) -> RunListing:
    """One line of `accelopt runs`: the checkpoint is read only for a run that has not finished."""
    run = _Run(run_dir, with_checkpoint=False)
    try:
        common = _common(run)
        best_id = run.beam_ids[0] if run.beam_ids else run.row.best_id
        best = run.candidate(best_id) if best_id else None
        figure = run.summary.best_figure if run.summary and run.summary.best_id == best_id else None
        return RunListing(**common, note=run.stop_reason, best_id=best_id,
                          best_speedup=figure.speedup if figure else versus(best, "baseline").speedup if best else None,
                          best_interval=[figure.ci_low, figure.ci_high] if figure else None,
                          best_measurements=figure.measurements if figure else None,
                          cost_usd=run.usage()[1])
    finally:
        run.close()


def list_runs(root: Path) -> list[RunListing]:
    """`accelopt runs`: every run directory at root (see find_runs), oldest first."""
    listed = [list_run(p) for p in find_runs(root)]
    return sorted(listed, key=lambda r: (r.started or "", r.run_dir))


def load_run(run_dir: Path) -> RunView:
    """`accelopt show`: the run directory as one record. NotARunDir for a path that holds none."""
    run = _Run(run_dir)
    try:
        return _view(run)
    finally:
        run.close()


def _counts(run: _Run, candidates: dict | None) -> tuple[int, dict[str, int]]:
    """Candidates evaluated and by status, as summary.json and the CLI count them (a duplicate is
    never evaluated): the checkpoint's, else summary.json's, else the candidate folders'."""
    if candidates:
        return candidate_counts(candidates)
    if run.summary is not None:
        return run.summary.candidates_evaluated, dict(run.summary.statuses)
    return candidate_counts({p.parent.name: _json(p) or {} for p in run.dir.glob("candidates/*/result.json")})


def _view(run: _Run) -> RunView:
    common = _common(run)
    beam = [c for c in (run.candidate(cid) for cid in run.beam_ids) if c]
    members = [BeamMember(id=c["id"], iteration=c.get("iteration") or 0, status=evaluation_of(c).get("status"),
                          kind=c.get("kind"), vs_baseline=versus(c, "baseline")) for c in beam]
    steps = chain(beam[0]["id"], run.candidate) if beam else []  # the baseline to the best kernel
    born = [lineage_of(c) for c in steps]
    plans: dict[str, dict] = {}
    wanted = {plan_id for b in born if (plan_id := b.get("plan_id")) and not b.get("plan_text")}
    if wanted and run.checkpoint is not None:
        try:
            plans = run.checkpoint.plans(wanted)
        except Exception as e:  # noqa: BLE001 - the rest of the view stands without the plans' text
            run.notes.append(f"plans unreadable from the checkpoint ({type(e).__name__}); titles shown")
    lineage = [Step(**step.model_dump(), plan_id=b.get("plan_id"),
                    plan=b.get("plan_text") or (plans.get(b.get("plan_id") or "") or {}).get("text")
                    or b.get("plan_title"))
               for step, b in zip(lineage_steps(steps), born)]
    diff = None
    first, last = (solution_of(steps[0]).get("source"), solution_of(steps[-1]).get("source")) if steps else (None, None)
    if first is not None and last is not None:
        diff = "\n".join(difflib.unified_diff(
            first.splitlines(), last.splitlines(),
            f"{steps[0]['id']}/kernel.py", f"{steps[-1]['id']}/kernel.py", lineterm=""))
    tokens, cost = run.usage()
    candidates = ((run.ck or {}).get("candidates") or {}) if run.ck is not None else None
    evaluated, statuses = _counts(run, candidates)
    device = run.row.device_name or (beam[0].get("device_name") if beam else None)
    figure = run.summary.best_figure if run.summary and beam and run.summary.best_id == beam[0]["id"] else None
    return RunView(**common, task_dir=run.meta.get("task_dir") or (run.summary.task_dir if run.summary else None),
                   state_text=STATES[run.state], stop_reason=run.stop_reason, held_by=run.held_by,
                   device_name=device, candidates_evaluated=evaluated, statuses=statuses, tokens=tokens, cost_usd=cost,
                   best_id=beam[0]["id"] if beam else None, best=versus(beam[0], "baseline") if beam else None,
                   best_figure=figure, not_confirmed=run.summary.not_confirmed if run.summary else None,
                   beam=members, lineage=lineage, diff=diff, notes=run.notes)
