"""The live display of a run (`accelopt optimize`, `resume`, `eval`): what the graph is doing now.

Fed by LangGraph's stream (`stream_mode=["updates", "custom"]`, `subgraphs=True`: parts are
`(namespace, mode, chunk)`). The *updates* say which node finished, so the phase follows from
node names: setup, then per iteration planning, writing kernels, measuring, fixing and
autotuning (the candidate subgraph's executor, profiler, fixer and autotune, per branch),
summarizing; each candidate is printed as one line above the bar when its result lands. The
*custom* events come from the nodes (`nodes/services.emit`): setup's steps, and every real
evaluation's start, the cluster node it went to (Ray) and its end, so the bar can say how many
evaluations are in flight and, on a cluster, where.

Counts mean what the final summary's do (`candidate_counts`): every candidate except the
baseline (`summary.json` `candidates_evaluated`), by status. Speedups carry their timer's label:
interpreter times are never called GPU times, and no best speedup is shown before the baseline
is measured. On the CPU interpreter nothing is called faster, slower, within noise or best: the
selector's rule there (records.leads_parent, stated once when the baseline lands: `interpreter_rule`)
is what each line reports, a kernel ranked above or below its parent, and the beam's head is
called that. `RunView` is the bookkeeping, with no terminal; `LiveDisplay` draws it with rich:
each line whole (a terminal wraps it; never cut), the bar only on a terminal.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

from accelopt.nodes.context import RunContext
from accelopt.nodes.records import INTERPRETER_LEAD, leads_parent, plans_of
from accelopt.tools.harness.result import FIXABLE, TIMER_LIVE, short_reason
from accelopt.tools.llm_spec import totals
from accelopt.tools.run_record import candidate_counts

log = logging.getLogger("accelopt")

# the candidate subgraph's stages, in the order a branch meets them
STAGES = ("writing kernels", "measuring", "fixing", "autotuning")
_SAMPLE = re.compile(r"^(.*?\.k\d+)")  # i1.m0.p2.k0.f1.a3 -> i1.m0.p2.k0: the branch (plan x sample)


INTERPRETER = "interpreter_wall"


def interpreter_rule() -> str:
    """The selector's rule on the interpreter (records.leads_parent), in words: said once per run."""
    return (f"CPU interpreter: its times are a CPU emulation's wall clock, not performance, so nothing is "
            f"called faster or slower. A kernel ranks above its parent only where every timing round has "
            f"it more than {INTERPRETER_LEAD:g}x ahead (a difference in work); otherwise just below it.")


def head_word(timer: str | None) -> str:
    """What the beam's first kernel is called: the best on a real timer, the beam's head on the interpreter."""
    return "beam head" if timer == INTERPRETER else "best"


def timer_label(timer: str | None) -> str | None:
    """What a timing is: 'GPU', 'interpreter time' (the CPU interpreter: not GPU performance), ..."""
    return TIMER_LIVE.get(timer, timer) if timer else None


def _latency_us(cand: dict) -> float | None:
    medians = [w["median_us"] for w in (cand.get("workloads") or {}).values() if w.get("median_us")]
    return math.exp(sum(map(math.log, medians)) / len(medians)) if medians else None


def candidate_line(cand: dict) -> Text:
    """One candidate's result: id, status, speedup and its timer when verified, else the reason."""
    ok = cand.get("status") == "verified"
    waiting = cand.get("status") == "in_flight"  # --quorum: not failed, collected by the next iteration
    style = "green" if ok else "yellow" if waiting else "red"
    line = Text("  ")
    line.append("✓ " if ok else "… " if waiting else "✗ ", style=style)
    line.append(f"{cand['id']:<16} ", style="bold")
    line.append(f"{cand.get('status') or 'unknown':<14}", style=style)
    label = timer_label(cand.get("timer"))
    if ok and cand["id"] == "baseline":
        us = _latency_us(cand)
        line.append(f" {us:,.1f} µs" if us else " measured")
        what = "the PyTorch reference" if cand.get("kind") == "reference" else "the baseline"
        line.append(f" ({label})" if label else "")
        line.append(f" · {what}", style="dim")
    elif ok:
        line.append(f" {cand.get('speedup') or 1.0:.2f}x" + (f" ({label})" if label else ""))
        if cand.get("timer") == INTERPRETER:
            if cand.get("parent_id"):
                line.append(_interpreter_rank(cand), style="dim")
        elif cand.get("beats_parent"):
            line.append(" · beats its parent", style="green")
        elif cand.get("loses_to_parent"):
            line.append(" · slower than its parent", style="dim")
        elif cand.get("parent_id") and cand.get("speedup_vs_parent") is not None:
            # not beyond noise against its parent: the selector ranks it below the parent
            line.append(f" · within noise of its parent ({cand['speedup_vs_parent']:.2f}x)", style="dim")
    else:
        reason = short_reason(cand.get("error"))
        if reason:
            line.append(f" {reason}", style="dim")
    if ok and "unaudited" in (cand.get("flags") or []):  # verified, yet the selector keeps it out
        flagged = ", ".join(f for f in cand["flags"] if f != "unaudited")
        why = short_reason((cand.get("audit") or {}).get("note"))
        line.append(f" · kept out of the beam: flagged ({flagged}) and not audited" + (f": {why}" if why else ""),
                    style="yellow")
    if cand.get("node"):
        line.append(f" · on {cand['node']}", style="dim")
    if ok and cand.get("plan_title"):
        title = cand["plan_title"]
        line.append(f" · {title if len(title) <= 120 else title[:119] + '…'}", style="dim")
    return line


def _interpreter_rank(cand: dict) -> str:
    """Where the selector puts an interpreter candidate against its parent (records.leads_parent),
    with the figures the rule read (the parent's time over the kernel's, per round): no speed verdict."""
    versus = cand.get("versus") or {}
    vs = versus.get("parent") or versus.get("baseline") or {}
    if vs.get("ci_low") is not None and vs.get("ci_high") is not None:
        ratio = f"parent/kernel time per round {vs['ci_low']:.2f}-{vs['ci_high']:.2f}x"
    elif cand.get("speedup_vs_parent") is not None:
        ratio = f"parent/kernel time {cand['speedup_vs_parent']:.2f}x"
    else:
        ratio = ""
    where = "above" if leads_parent(cand) else "below"
    return f" · ranks {where} its parent" + (f" ({ratio})" if ratio else "")


class RunView:
    """What the live display knows about a run, from the parts of its stream; no terminal.

    `feed(namespace, mode, chunk)` returns the lines to print above the bar (startup steps,
    candidate results, iteration ends); `description()` and `info()` are the bar's two texts."""

    def __init__(self, ctx: RunContext, state: dict | None = None):
        state = state or {}
        self.ctx = ctx
        self.candidates: dict[str, dict] = dict(state.get("candidates") or {})
        self.printed: set[str] = set(self.candidates)  # a resumed run's earlier candidates are not news
        self.baseline_id: str = state.get("baseline_id") or "baseline"
        self.usage: list[dict] = list(state.get("usage") or [])
        self.iteration: int = state.get("iteration") or 0
        self.completed = sum(1 for h in state.get("history") or [] if "event" not in h)
        self.beam: list[str] = list(state.get("beam") or [])
        self.phase = "resuming" if state else "starting"
        self.step: str | None = None
        self.plans = 0
        self.plans_ahead = 0  # the pipeline schedule: plans made for the next iteration beside this one's kernels
        self.branches: dict[str, str] = {}  # candidate branch (its namespace) -> its stage, this iteration
        self.samples: dict[str, str] = {}  # sample id (i1.m0.p2.k0) -> its branch
        self.stopping: str | None = None
        self.in_flight: dict[str, str | None] = {}  # evaluation token -> node it runs on (None: not known)
        self.phases: list[tuple[int, str]] = []  # (iteration, phase), in the order entered
        self._phases_logged = 0

    # -------------------------------------------------------- feeding

    def feed(self, namespace: tuple, mode: str, chunk: Any) -> list[Text]:
        if mode == "custom":
            return self._custom(chunk) if isinstance(chunk, dict) else []
        lines: list[Text] = []
        if mode != "updates" or not isinstance(chunk, dict):
            return lines
        for node, values in chunk.items():
            if node == "__interrupt__":
                self.phase = "waiting for the plan review"
                continue
            if not isinstance(values, dict):  # a node that wrote nothing
                values = {}
            if not namespace:  # the subgraph's usage reaches the top level through `candidate`
                self.usage += values.get("usage") or []
            lines += self._landed(values.get("candidates") or {})
            if namespace:
                self.phase = "candidates"  # (a resumed run may re-enter its branches without a dispatch)
                self._branch(str(namespace[0]), node, values)
            else:
                lines += self._top(node, values)
        self._note_phases()
        return lines

    def _custom(self, event: dict) -> list[Text]:
        kind = event.get("event")
        if kind == "step":
            self.step = str(event.get("text") or "")
            return [Text(f"  · {self.step}", style="dim")]
        token = str(event.get("eval"))
        if kind == "eval_start":
            self.in_flight[token] = None
        elif kind == "eval_node" and token in self.in_flight:
            self.in_flight[token] = event.get("node")
        elif kind == "eval_end":
            self.in_flight.pop(token, None)
        return []

    def _landed(self, candidates: dict) -> list[Text]:
        lines = []
        for cid, cand in candidates.items():
            if not isinstance(cand, dict):
                continue
            self.candidates[cid] = cand
            if cid not in self.printed and cand.get("status"):
                self.printed.add(cid)
                lines.append(candidate_line(cand))
                if cid == self.baseline_id and cand.get("timer") == INTERPRETER:
                    lines.append(Text(f"  {interpreter_rule()}", style="dim"))
        return lines

    def _top(self, node: str, values: dict) -> list[Text]:
        if node == "setup":
            self.beam = list(values.get("beam") or self.beam)
            self.baseline_id = values.get("baseline_id") or self.baseline_id
            self.step = None
            self.phase = "stopped at setup" if values.get("stop_reason") else "starting the search"
        elif node == "recall":
            self.iteration = values.get("iteration", self.iteration)
            self.branches, self.samples = {}, {}
            # pipeline: from the third iteration on, its plans were made beside the last one's kernels
            made_ahead = self.ctx.schedule.plans_ahead and self.plans_ahead > 0
            self.plans, self.plans_ahead = (self.plans_ahead if made_ahead else 0), 0
            self.phase = "candidates" if made_ahead else "planning"
        elif node == "planner":
            plans = _plain(values.get("plans")) or []
            mine = plans_of(plans, self.iteration)
            self.plans += len(mine)
            self.plans_ahead += len(plans) - len(mine)
        elif node == "dispatch" and (not self.ctx.schedule.plans_ahead or self.phase in ("planning", "resuming")):
            # (under the pipeline schedule, not the dispatch after the planners ahead)
            if "plans" in values:  # a reviewed list replaces the proposed one
                self.plans = len(_plain(values["plans"]) or [])
            self.phase = "candidates"
        elif node == "candidate":  # a branch ended (it may have streamed no profiler: no kernel, no fix)
            for cid in values.get("candidates") or {}:
                sample = _SAMPLE.match(cid)
                branch = self.samples.get(sample.group(1)) if sample else None
                if branch:
                    self.branches[branch] = "done"
        elif node == "selector":
            self.completed += 1
            self.beam = list(values.get("beam") or self.beam)
            self.stopping = values.get("stop_reason")
            # the schedules that overlap distill an iteration's lessons beside the next one
            self.phase = "summarizing" if self.ctx.schedule.lessons == "after_selection" or self.stopping else "recording"
            return [self._iteration_line()]
        elif node == "summarizer":
            self.phase = "recording"
        elif node == "record":
            on_gpu = (values.get("summary") or {}).get("timer") == "cuda_event" and self.ctx.versus_torch_compile
            self.phase = (("timing the best against torch.compile" if on_gpu else "finished")
                          if self.stopping or values.get("stop_reason")
                          else "recalling lessons" if self.ctx.use_memory else "starting the next iteration")
        elif node == "standing":
            self.phase = "finished"
        return []

    def _branch(self, branch: str, node: str, values: dict) -> None:
        """A node of one candidate branch finished. The subgraph streams its output channels only
        (candidates, usage): the branch is its namespace, its attempt the candidate the profiler wrote."""
        if node in ("executor", "fixer"):
            self.branches[branch] = "measuring"
        elif node == "profiler":
            for cid, cand in (values.get("candidates") or {}).items():
                sample = _SAMPLE.match(cid)
                if sample:
                    self.samples[sample.group(1)] = branch
                self.branches[branch] = self._after_profiler(cand)
        elif node == "autotune":
            self.branches[branch] = "done"

    def _after_profiler(self, current: dict) -> str:
        """graph/routing.after_profiler, as far as the streamed attempt tells it."""
        status = current.get("status")
        if status == "verified":
            return "autotuning" if self.ctx.autotune > 0 else "done"
        if status == "no_code" and self.ctx.model_spec("fixer").provider == "tuner":
            return "done"
        return "fixing" if status in FIXABLE and (current.get("fix_attempt") or 0) < self.ctx.fixes else "done"

    def _note_phases(self) -> None:
        if self.phase == "candidates":
            names = [stage for stage, n in self.stage_counts().items() if n and stage != "done"]
        else:
            names = [self.phase]
        for name in names:
            if (self.iteration, name) not in self.phases:
                self.phases.append((self.iteration, name))

    def new_phases(self) -> list[str]:
        """Phases entered since the last call, once each per iteration (for a log with no live bar)."""
        fresh = self.phases[self._phases_logged:]
        self._phases_logged = len(self.phases)
        return [f"iteration {i}/{self.ctx.iterations}: {p}" if i else f"setup: {p}" for i, p in fresh]

    # -------------------------------------------------------- what to show

    def stage_counts(self) -> dict[str, int]:
        """Branches of this iteration's candidate stage by stage ('writing kernels': sent, not yet heard of)."""
        if self.phase != "candidates":
            return {}
        counts = {stage: 0 for stage in (*STAGES, "done")}
        for stage in self.branches.values():
            counts[stage] = counts.get(stage, 0) + 1
        counts["writing kernels"] = max(self.plans * self.ctx.kernels_per_plan() - len(self.branches), 0)
        return counts

    def description(self) -> str:
        if self.phase == "candidates":
            counts = self.stage_counts()
            active = [f"{stage} {counts[stage]}" for stage in STAGES if counts[stage]]
            phase = " · ".join(active) if active else "selecting the beam" if self.branches else "writing kernels"
        elif self.phase == "starting" and self.step:
            phase = self.step
        else:
            phase = self.phase
        return f"iteration {self.iteration}/{self.ctx.iterations} · {phase}" if self.iteration else f"setup · {phase}"

    def best(self) -> dict | None:
        """The beam's head (not the largest median: a child within noise is no win); None before the
        baseline is measured."""
        head = self.candidates.get(self.beam[0]) if self.beam else None
        return head if head and head.get("status") == "verified" else None

    def in_flight_text(self) -> str | None:
        if not self.in_flight:
            return None
        nodes: dict[str, int] = {}
        for node in self.in_flight.values():
            if node:
                nodes[node] = nodes.get(node, 0) + 1
        if not nodes:  # the local pool: one count
            return f"in flight: {len(self.in_flight)}"
        waiting = sum(1 for node in self.in_flight.values() if not node)
        parts = [f"{node} {n}" for node, n in sorted(nodes.items())] + ([f"waiting {waiting}"] if waiting else [])
        return "in flight: " + ", ".join(parts)

    def info(self) -> str:
        parts = []
        evaluated, statuses = candidate_counts(self.candidates, self.baseline_id)
        if self.iteration or evaluated:
            parts.append(f"evaluated {evaluated} · verified {statuses.get('verified', 0)}")
        best = self.best()
        if best is not None:
            label = timer_label(best.get("timer"))
            parts.append(f"{head_word(best.get('timer'))} {best.get('speedup') or 1.0:.2f}x"
                         + (f" ({label})" if label else ""))
        flight = self.in_flight_text()
        if flight:
            parts.append(flight)
        if self.usage:
            spent = totals(self.usage)
            cost = "unpriced" if spent.get("unpriced_calls") and not spent["cost_usd"] else f"${spent['cost_usd']:.4f}"
            parts.append(f"{spent['input_tokens'] + spent['output_tokens']:,} tok · {cost}")
        return " · ".join(parts)

    def _iteration_line(self) -> Text:
        best = self.best()
        line = Text(f"iteration {self.iteration}/{self.ctx.iterations} done", style="bold")
        if best is not None:
            label = timer_label(best.get("timer"))
            line.append(f": {head_word(best.get('timer'))} {best['id']} {best.get('speedup') or 1.0:.2f}x"
                        + (f" ({label})" if label else ""))
        evaluated, statuses = candidate_counts(self.candidates, self.baseline_id)
        line.append(f" · evaluated {evaluated} · verified {statuses.get('verified', 0)} (baseline not counted)")
        return line


def _plain(value: Any) -> Any:
    """An Overwrite's value (plans replaced by a review or reset by recall), else the value."""
    return getattr(value, "value", value)


def hanging(line: Text, console: Console, indent: int | None = None) -> Text:
    """A line within the terminal's width: wrapped at words, each continuation indented `indent`
    columns (default: 2 past the line's own indent, a live candidate's under its id), never cut.
    A word wider than the room left (a long path) folds. `check`'s report lines use it too."""
    width = console.width
    lead = len(line.plain) - len(line.plain.lstrip(" "))
    indent = min(lead + 2 if indent is None else indent, width // 3)
    if line.cell_len <= width:
        return line
    first = line.wrap(console, width, overflow="fold")[0]
    rest = line[len(first.plain):]
    rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")):]  # the blank the wrap broke at
    parts = [Text(" " * indent) + part for part in rest.wrap(console, width - indent, overflow="fold")]
    for part in (first, *parts):
        part.rstrip()
    return Text("\n").join([first, *parts])


class LiveDisplay:
    """A rich progress bar over a RunView, with each new line printed above it. Where the console
    is no terminal (a pipe, a CI log) there is no live bar to read: none is drawn (its last frame
    would be one line cut at the width), and each phase is printed as a line when it is first
    entered in an iteration. On a terminal the bar's texts fold rather than end in an ellipsis.
    Whatever goes wrong in the display, the run goes on (one warning)."""

    def __init__(self, console: Console, ctx: RunContext, state: dict | None = None):
        self.view = RunView(ctx, state)
        self.console = console
        self.log_phases = not console.is_terminal
        fold = Column(overflow="fold")
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}", table_column=fold),
                                 BarColumn(bar_width=20), TextColumn("{task.fields[info]}", table_column=fold.copy()),
                                 TimeElapsedColumn(), console=console, transient=False, disable=self.log_phases)
        self.bar: TaskID | None = None
        self._broken = False

    def __enter__(self) -> LiveDisplay:
        self.progress.__enter__()
        self.bar = self.progress.add_task(self.view.description(), total=self.view.ctx.iterations,
                                          completed=self.view.completed, info=self.view.info())
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def feed(self, namespace: tuple, mode: str, chunk: Any) -> None:
        if self._broken:
            return
        try:
            lines = self.view.feed(namespace, mode, chunk)
            if self.log_phases:
                lines += [Text(p, style="bold") for p in self.view.new_phases()]
            for line in lines:
                if self.log_phases:  # a log keeps each line whole, however long
                    self.progress.console.print(line, soft_wrap=True)
                else:  # a terminal: within its width, read now (a resized window), wrapped with an indent
                    self.progress.console.print(hanging(line, self.progress.console), soft_wrap=True)
            if self.bar is not None:
                self.progress.update(self.bar, completed=self.view.completed, description=self.view.description(),
                                     info=self.view.info())
        except Exception as exc:  # noqa: BLE001 - the display is not the run
            self._broken = True
            log.warning("the live display failed (%s: %s); the run goes on", type(exc).__name__, exc)
