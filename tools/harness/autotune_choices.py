"""The run's side of the judge's autotuning (autotune_rounds.py chooses, in the judge): the choice
carried to everything that runs the same source again, so that one source has one configuration.

- `chosen_before` / `remember_choices`: the pins the judge chose for a source, kept by this
  process and handed back for its re-check and every later evaluation (a parent timed as a
  comparator), rather than chosen anew;
- `pinned_source` / `pinning`: the source with its configuration list narrowed to the choice, for a
  fresh process that is not a sandbox (the audit under ncu, best_kernel.py, the re-check), written
  only where the source's literal list is, field by field, the list its autotuner ran (a module may
  edit its configurations at import: the literal entry was then never checked) and the entry
  written reads back as the configuration chosen; `pinning_evidence` says where the lists differ;
- `compiled_before` / `keep_compiled`: what a source's sandbox compiled, for its next evaluation;
- `autotune_evidence`: the choice in words, for the verdict's evidence (the fixer and planner read it).
"""

from __future__ import annotations

import ast
import atexit
import collections
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass

from accelopt.tools.harness.autotune_record import GivenPin
from accelopt.tools.harness.autotune_rounds import list_differences
from accelopt.tools.harness.kernel_source import KernelSource
from accelopt.tools.harness.result import AutotuneRecord, EvalResult, TunedKernel
from accelopt.tools.task import Task
from accelopt.tools.tunables import AutotuneSpace, ConfigEntry, write_configs

# The configurations the judge chose for sources this process evaluated, so that their re-check,
# audit and every later evaluation (a parent timed as a comparator) run the same ones: keyed by
# task folder, device and the source's digest; the oldest forgotten first.
_CHOSEN: collections.OrderedDict[tuple[str, str, str], dict[str, GivenPin]] = collections.OrderedDict()
CHOSEN_KEPT = 256
_LOCK = threading.Lock()  # the graph evaluates candidates on several threads of one process


def _chosen_key(task: Task, device: str, source: str) -> tuple[str, str, str]:
    return str(task.root), device, hashlib.sha256(source.encode()).hexdigest()


def chosen_before(task: Task, device: str, sources: dict[str, str]) -> dict[str, dict[str, GivenPin]]:
    """Per timed function, the pins the judge chose when this process last evaluated its source
    (AutotuneRecord.given: each kernel's choices and the configuration list they index)."""
    out = {}
    for name, source in sources.items():
        pins = _CHOSEN.get(_chosen_key(task, device, source))
        if pins:
            out[name] = pins
    return out


def remember_choices(task: Task, device: str, sources: dict[str, str], result: EvalResult) -> None:
    with _LOCK:
        for name, record in result.autotune.items():
            if name in sources and record.how in ("timed", "given") and record.given():  # a GPU's choice, not a default
                key = _chosen_key(task, device, sources[name])
                _CHOSEN[key] = record.given()
                _CHOSEN.move_to_end(key)
        while len(_CHOSEN) > CHOSEN_KEPT:
            _CHOSEN.popitem(last=False)


# What the same sources' sandboxes compiled, kept by this process for their next evaluation (a
# served `check` of a kernel already checked: its autotuned configurations are not compiled again).
# Copied in as any candidate's cache is (triton_cache.copy: regular files only, no link followed).
_COMPILED: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()
COMPILED_KEPT = 16
_compiled_root: list[str] = []


def compiled_before(task: Task, source: str) -> str | None:
    path = _COMPILED.get(_chosen_key(task, "cuda", source))
    return path if path is not None and os.path.isdir(path) else None


def keep_compiled(task: Task, source: str, cache: str | None) -> None:
    """Keep the Triton cache `cache` (a sandbox's, moved out as it ended) for the same source's
    next evaluation in this process; the oldest of COMPILED_KEPT goes first."""
    if not cache or not os.path.isdir(cache):
        return
    with _LOCK:
        _keep(task, source, cache)


def _keep(task: Task, source: str, cache: str) -> None:
    if not _compiled_root:
        _compiled_root.append(tempfile.mkdtemp(prefix="accelopt-compiled-"))
        atexit.register(shutil.rmtree, _compiled_root[0], True)
    key = _chosen_key(task, "cuda", source)
    if key in _COMPILED and os.path.isdir(_COMPILED[key]):
        _COMPILED.move_to_end(key)
        return
    target = tempfile.mkdtemp(prefix="source-", dir=_compiled_root[0])
    os.rmdir(target)  # shutil.move makes it: the cache's own folder, renamed
    shutil.move(cache, target)
    _COMPILED[key] = target
    while len(_COMPILED) > COMPILED_KEPT:
        shutil.rmtree(_COMPILED.popitem(last=False)[1], ignore_errors=True)


def autotune_evidence(result: EvalResult) -> list[str]:
    """Which configuration each autotuned kernel ran and who chose it, the candidate's and each
    comparator's, and what a tuning key shared by workloads costs (with its figures)."""
    lines = []
    for name, record in result.autotune.items():
        who = "the kernel" if name == "candidate" else f"the {name}"
        lines += [f"autotune, {who}: {line}" for line in record.summary()]
        lines += [f"autotune, {who}: {note}" for note in record.notes]
    return lines


# triton.Config's own defaults for the fields a literal entry may leave out
CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None, "ir_override": None}


def literal_fields(entry: ConfigEntry) -> dict:
    """A literal `triton.Config(...)` entry of the source as the sandbox reports a configuration's
    fields (sandbox.config_fields): what the entry makes, read without running it."""
    fields: dict = {"kwargs": dict(entry.meta)}
    for name, default in CONFIG_DEFAULTS.items():
        fields[name] = entry.launch.get(name, default)
    if "ir_override" in entry.code:
        try:
            fields["ir_override"] = ast.literal_eval(entry.code["ir_override"])
        except (ValueError, SyntaxError):
            fields["ir_override"] = f"<code> {entry.code['ir_override']}"  # code: never equal to what ran
    fields["pre_hook"] = entry.code.get("pre_hook", "None") != "None"
    return fields


def literal_differences(space: AutotuneSpace | None, kernel: TunedKernel) -> list[str] | None:
    """How the source's literal config list differs from the list its autotuner ran (the sandbox's
    fields), configuration by configuration (`source -> run`); [] where they are the same; None
    where there is nothing to compare (another kernel, a list the source does not write literally,
    or a record without fields)."""
    if space is None or not space.entries or space.kernel != kernel.kernel or not kernel.fields:
        return None
    return list_differences([literal_fields(e) for e in space.entries], kernel.fields)


def _single_choice(record: AutotuneRecord | None) -> tuple[TunedKernel, int] | None:
    """The one controlled kernel and the one configuration the judge chose for every key, or None."""
    if record is None or record.how not in ("timed", "given"):
        return None
    controlled = [k for k in record.kernels if k.controlled]
    if len(controlled) != 1:
        return None
    indices = set(controlled[0].choices.values()) | {controlled[0].default}
    return (controlled[0], indices.pop()) if len(indices) == 1 else None


@dataclass
class Pinning:
    """What a fresh process that is not a sandbox runs for a source (the audit, best_kernel.py):
    `kernel`, the source with the judge's choice written in (`pinned`) or as written; `why_not`:
    why a single choice was not written in."""
    kernel: KernelSource
    pinned: bool = False
    why_not: str | None = None


def pinning(source: str | KernelSource, record: AutotuneRecord | None) -> Pinning:
    """The source with its autotuned kernel's configuration list narrowed to what the judge chose
    (tunables.write_configs), so that a fresh process runs that configuration rather than tuning
    anew; as written where nothing was chosen by timing or more than one configuration was. The
    entry written is the one the judge checked: the source's literal list must be, field by field,
    the list its autotuner ran (a module may replace or edit its configurations at import), and the
    pinned source's one entry must read back as the configuration chosen; else the source is kept
    as written, and `why_not` says why."""
    kernel = KernelSource.of(source)
    single = _single_choice(record)
    if single is None:
        return Pinning(kernel)
    tuned, index = single
    space = kernel.autotune
    differences = literal_differences(space, tuned)
    if differences is None:
        return Pinning(kernel, why_not="its configuration list is not one the source writes literally, or the "
                                       "judge's record does not say what each configuration held")
    if differences:
        return Pinning(kernel, why_not=f"the @triton.autotune list in the source is not the list its autotuner ran "
                                       f"(source -> run: {'; '.join(differences)[:400]})")
    assert space is not None  # literal_differences compared it
    if not 0 <= index < len(space.entries):
        return Pinning(kernel, why_not=f"configuration {index} is not in the list")
    try:
        pinned = KernelSource.parse(write_configs(kernel.text, [space.configs[index]]))
    except ValueError as e:
        return Pinning(kernel, why_not=f"the chosen configuration could not be written in: {e}")
    written = pinned.autotune
    if written is None or len(written.entries) != 1 \
            or list_differences([literal_fields(written.entries[0])], [tuned.fields[index]]):
        return Pinning(kernel, why_not="the entry written would not be the configuration the judge checked")
    return Pinning(pinned, pinned=True)


def pinned_source(source: str | KernelSource, record: AutotuneRecord | None) -> KernelSource:
    """What a fresh process that is not a sandbox runs for this source (`pinning`)."""
    return pinning(source, record).kernel


def pinning_evidence(source: str | KernelSource, record: AutotuneRecord | None) -> list[str]:
    """Where the source's literal config list is not the list its autotuner ran, said with the
    difference: the kernel was judged as its autotuner runs it, and nothing else runs the literal list."""
    space = KernelSource.of(source).autotune
    lines = []
    for k in record.kernels if record is not None else []:
        differences = literal_differences(space, k)
        if differences:
            lines.append(f"autotune, the kernel: {k.kernel}: the @triton.autotune list in the source is not the "
                         f"list its autotuner ran (source -> run: {'; '.join(differences)[:400]}): judged as its "
                         "autotuner runs it; no source is written with a configuration of the literal list")
    return lines
