"""The run's side of the judge's autotuning (autotune_rounds.py chooses, in the judge): the choice
carried to everything that runs the same source again, so that one source has one configuration.

- `chosen_before` / `remember_choices`: the pins the judge chose for a source, kept by this
  process and handed back for its re-check and every later evaluation (a parent timed as a
  comparator), rather than chosen anew;
- `pinned_source`: the source with its configuration list narrowed to the choice, for a fresh
  process that is not a sandbox (the audit under ncu, best_kernel.py);
- `compiled_before` / `keep_compiled`: what a source's sandbox compiled, for its next evaluation;
- `autotune_evidence`: the choice in words, for the verdict's evidence (the fixer and planner read it).
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import os
import shutil
import tempfile
import threading

from accelopt.tools.harness.kernel_source import KernelSource
from accelopt.tools.harness.result import AutotuneRecord, EvalResult
from accelopt.tools.task import Task
from accelopt.tools.tunables import write_configs

# The configurations the judge chose for sources this process evaluated, so that their re-check,
# audit and every later evaluation (a parent timed as a comparator) run the same ones: keyed by
# task folder, device and the source's digest; the oldest forgotten first.
_CHOSEN: collections.OrderedDict[tuple[str, str, str], dict[str, dict[str, int]]] = collections.OrderedDict()
CHOSEN_KEPT = 256
_LOCK = threading.Lock()  # the graph evaluates candidates on several threads of one process


def _chosen_key(task: Task, device: str, source: str) -> tuple[str, str, str]:
    return str(task.root), device, hashlib.sha256(source.encode()).hexdigest()


def chosen_before(task: Task, device: str, sources: dict[str, str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per timed function, the pins the judge chose when this process last evaluated its source."""
    out = {}
    for name, source in sources.items():
        pins = _CHOSEN.get(_chosen_key(task, device, source))
        if pins:
            out[name] = pins
    return out


def remember_choices(task: Task, device: str, sources: dict[str, str], result: EvalResult) -> None:
    with _LOCK:
        for name, record in result.autotune.items():
            if name in sources and record.how in ("timed", "given") and record.pins():  # a GPU's choice, not a default
                key = _chosen_key(task, device, sources[name])
                _CHOSEN[key] = record.pins()
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


def pinned_source(source: str | KernelSource, record: AutotuneRecord | None) -> KernelSource:
    """The source with its autotuned kernel's configuration list narrowed to what the judge chose
    (tunables.write_configs), so that a fresh process (the audit, a user running best_kernel.py)
    runs that configuration rather than tuning anew; unchanged where nothing was chosen by timing,
    more than one kernel or configuration was chosen, or the list is not one the source writes
    literally."""
    kernel = KernelSource.of(source)
    if record is None or record.how not in ("timed", "given"):
        return kernel
    controlled = [k for k in record.kernels if k.controlled]
    space = kernel.autotune
    if len(controlled) != 1 or space is None or not space.entries or space.kernel != controlled[0].kernel:
        return kernel
    k = controlled[0]
    indices = set(k.choices.values()) | {k.default}
    if len(indices) != 1 or len(space.entries) != len(k.configs):
        return kernel
    try:
        return KernelSource.parse(write_configs(kernel.text, [space.configs[indices.pop()]]))
    except ValueError:
        return kernel
