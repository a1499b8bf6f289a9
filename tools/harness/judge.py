"""The judge: the trusted side of the trust boundary.

A persistent process (one per GPU, or up to one per core on the interpreter) started by pool.py as
`python judge.py`, one JSON request per line on stdin, one verdict line per request on a private
copy of stdout. It owns the seeds, the inputs, the reference, the expected outputs, the
comparison and every decision, and it never imports candidate code: each candidate runs in a
sandbox process of its own (sandbox.py) that is killed after that one candidate. Comparators
(baseline, parent) run in sandboxes of their own, kept for the same source only.

The sandboxes as the judge drives them (the template, each forked sandbox, the warm spares)
are judge_sandboxes.py's; the comparators and the interleaved timing rounds (4 below) are
timing_rounds.py's, a mixin of `Judge`. This file is the protocol and the checks.

The evidence, in order (the first failure decides):
0. each @triton.autotune kernel's configuration chosen by the judge (autotune_rounds.py): every
   configuration timed on a GPU (its outputs and trace checked), or checked on the interpreter,
   and one pinned for everything below;
1. correctness on every workload x seed, fresh inputs per call, against outputs the judge
   computed itself; shape, dtype, NaN/Inf (unwritten outputs read as poison), the task's
   correctness rule (correctness.py: allclose, relative L2; packed fp4 bit for bit),
   inputs mutated (the judge sees the shared input memory), threads left running, the same
   call twice must agree; then draws beyond the task's own where the reference is finite: signs
   for inputs drawn >= 0 (`wider`), and on the smallest workload, for every autotuned
   configuration, the stress draws (`stress`, stress_draws.py: large, shifted, constant and
   one-hot rows);
2. ghost replay: with every Triton launch stubbed out the outputs must no longer be correct;
3. the trace of one call: no compute outside the candidate's Triton launches (GPU kernels or,
   on the interpreter, host ops that are not data movement);
4. timing in interleaved rounds with the comparators, on a GPU until every comparison is
   decided (stats.py); the judge picks, after each timed call, whether to read its outputs, and
   writes new inputs between calls at random (timing_rounds._accountable_calls); comparators'
   outputs are checked too, and the judge's own clock bounds what the sandbox reports;
5. correctness again after timing, on inputs never seen before.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import json
import os
import re
import secrets
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

RESULT_MARK = "@@ACCELOPT_RESULT@@"
# On the widened and stress draws, atol may grow to this multiple of the reference's own rounding
# against float64: another order of the same arithmetic errs by a few times what the reference's
# order does; an answer computed otherwise (abs where the reference is ReLU) by the size of the
# values. A chunked float32 scan of 16384 signed values (KernelBench's reverse cumsum), emulated in
# torch over 200 draws, needed up to 8.3x, more than 4x in 5% of them: 4, the factor while the
# signed draw's seed was a constant, rejected an honest scan on one draw in twenty.
ROUNDING_SLACK = 16.0
# Inputs and reference outputs kept between requests, bounded by bytes: a slow reference
# (FlashInfer-Bench's attention references are Python loops taking seconds) runs once per
# workload x seed, while KernelBench-sized inputs (GBs) are never kept.
REFERENCE_CACHE_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
# Host ops (interpreter) and GPU kernels that move data rather than compute.
_DATA_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "copy_", "clone", "to", "_to_copy", "contiguous", "view", "reshape", "_reshape_alias",
    "as_strided", "expand", "expand_as", "permute", "transpose", "t", "squeeze", "unsqueeze", "flatten",
    "unflatten", "narrow", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "stack", "cat",
    "detach", "alias", "lift_fresh", "resize_", "set_", "item", "_local_scalar_dense", "view_as", "movedim",
    "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "arange", "type_as", "is_nonzero",
    "resolve_conj", "resolve_neg", "_unsafe_view", "index_select", "result_type", "numpy_T", "is_same_size",
    "record_stream", "pin_memory", "_pin_memory", "is_pinned", "empty_permuted", "repeat", "view_as_real",
}
# Index setup an honest kernel does with torch before its launches (prefix sums of lengths,
# searching segment starts, expanding indices): integer bookkeeping, not the task's compute.
# The ghost replay still catches a task whose whole answer is one of these. Only on integers:
# a float cumsum is a reduction (a kernel name's template types, or the dtypes the interpreter's
# trace writes the same way, `aten::cumsum<double>`, say which).
_INDEX_OPS = {"cumsum", "cumsum_", "searchsorted", "repeat_interleave", "bucketize", "nonzero", "diff", "bincount"}
_INDEX_KERNELS = re.compile(r"cub::|DeviceScan|DeviceSelect|scan_kernel|searchsorted|repeat_interleave|bucketize|"
                            r"nonzero|compute_cuda_kernel", re.IGNORECASE)
_FLOAT_TYPES = re.compile(r"\b(float|double|Half|BFloat16|Float8\w*|complex)\b")
_INT_TYPES = re.compile(r"\b(int|long|short|unsigned|bool|signed char|int(8|16|32|64)_t)\b")


def _integer_bookkeeping(kernel: str) -> bool:
    """An ATen GPU kernel whose template types are all integers (`CUDAFunctor_add<int>`,
    `sub ... <long>`): index arithmetic such as indptr differences, not the task's float math."""
    return ("at::" in kernel or "at_cuda_detail" in kernel) and bool(_INT_TYPES.search(kernel)) \
        and not _FLOAT_TYPES.search(kernel)


_DATA_KERNELS = re.compile(r"Memcpy|Memset|copy|Copy|fill|Fill|zero|Zero|arange|CatArray|cat_|unrolled_elementwise"
                           r"_kernel<.*(copy|cast)", re.IGNORECASE)


def foreign_work(device: str, seen: list[str], own: list[str] | set[str]) -> list[str]:
    """What a call ran that is neither the candidate's own Triton kernels (`own`) nor data
    movement or index bookkeeping: GPU kernel names on a GPU, host aten ops on the interpreter.
    The one rule for the judge's traces and the ncu audit."""
    if device == "cuda":
        foreign = [n for n in seen if not any(n == k or n.startswith(k) for k in own)
                   and not _DATA_KERNELS.search(n) and not _integer_bookkeeping(n)
                   and not (_INDEX_KERNELS.search(n) and not _FLOAT_TYPES.search(n))]
    else:
        foreign = [n for n in seen if not _host_bookkeeping(n)]
    return list(dict.fromkeys(foreign))


def _host_bookkeeping(op: str) -> bool:
    """A host op (`aten::cumsum<long int>`: its name, then its inputs' dtypes) that moves data,
    or sets up indices on integers."""
    name = op.split("<", 1)[0].removeprefix("aten::")
    return name in _DATA_OPS or (name in _INDEX_OPS and not _FLOAT_TYPES.search(op))


# CPU a thread the kernel started may use in a call before it rejects (/proc counts 10 ms ticks)
THREAD_CPU_S = 0.03


def _own_threads(box, device: str, where: str) -> None:
    """Threads the candidate started (at its import or in a call: the OS's list against the one
    taken before its import, `_thread.start_new_thread` and native threads included) must be gone
    after a call. On a GPU only those that used CPU: the driver may start idle helpers late."""
    for _ in range(10):  # a thread just joined may still be leaving the OS's list
        new = box.new_threads()
        if device == "cuda":
            new = {tid: cpu for tid, cpu in new.items() if cpu >= THREAD_CPU_S}
        if not new:
            return
        time.sleep(0.01)
    raise Reject("cheat_suspected", f"{where}: {len(new)} thread(s) the kernel started (at its import or in a call) "
                 f"still running after the call, {sum(new.values()):.2f} s of CPU; work must not escape the call")


def _same_threads(before: float, after: float, where: str) -> None:
    """Once compiled, a call runs on its own thread: the threads the kernel started, running or
    ended, must not have used CPU during it."""
    if after - before > THREAD_CPU_S:
        raise Reject("cheat_suspected", f"{where}: threads the kernel started used {after - before:.2f} s of CPU "
                     "during the call; work must run in the kernel's own Triton launches")


def _load_sibling(name: str, filename: str):
    """A file beside this one: run as the judge (a script), loaded by path, since the judge imports
    nothing of the accelopt package; imported as part of it (the pool reads RESULT_MARK), the
    package's own module, not a second copy."""
    if __package__:
        return importlib.import_module(f"{__package__}.{filename.removesuffix('.py')}")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     filename))
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


correctness = _load_sibling("accelopt_correctness", "correctness.py")  # the correctness rules (evaluators)
seeds = _load_sibling("accelopt_seeds", "seeds.py")  # every input's seed, derived from the evaluation's
confine = _load_sibling("accelopt_confine", "confine.py")
# what the next two load from the judge's sys.modules (they load nothing by path themselves)
_load_sibling("accelopt_stats", "stats.py")
_load_sibling("accelopt_triton_cache", "triton_cache.py")
# the autotune record, typed once, with its one pins reader (autotune_rounds too takes it from sys.modules)
autotune_record = _load_sibling("accelopt_autotune_record", "autotune_record.py")
judge_sandboxes = _load_sibling("accelopt_judge_sandboxes", "judge_sandboxes.py")  # the sandboxes it drives
timing_rounds = _load_sibling("accelopt_timing_rounds", "timing_rounds.py")  # the comparators and timing rounds
autotune_rounds = _load_sibling("accelopt_autotune_rounds", "autotune_rounds.py")  # who chooses a configuration
stress_draws = _load_sibling("accelopt_stress_draws", "stress_draws.py")  # inputs where float arithmetic breaks
# Every verdict the judge returns, raised by the correctness rules too: one class, correctness.py's.
if TYPE_CHECKING:  # how mypy names them (the judge, a script, loads the files by path)
    from accelopt.tools.harness.autotune_record import AutotuneRecord, pins
    from accelopt.tools.harness.autotune_rounds import AutotuneRounds
    from accelopt.tools.harness.correctness import Reject
    from accelopt.tools.harness.judge_sandboxes import Sandbox, Sandboxes, SandboxFailure, _call_mode, _owned, _tail
    from accelopt.tools.harness.timing_rounds import COPY, TimingRounds, _nbytes, _same_processes
else:
    AutotuneRecord, pins = autotune_record.AutotuneRecord, autotune_record.pins
    AutotuneRounds = autotune_rounds.AutotuneRounds
    Reject = correctness.Reject
    Sandbox, Sandboxes, SandboxFailure = (
        judge_sandboxes.Sandbox, judge_sandboxes.Sandboxes, judge_sandboxes.SandboxFailure)
    _call_mode, _owned, _tail = judge_sandboxes._call_mode, judge_sandboxes._owned, judge_sandboxes._tail
    COPY, TimingRounds = timing_rounds.COPY, timing_rounds.TimingRounds
    _nbytes, _same_processes = timing_rounds._nbytes, timing_rounds._same_processes


# ---------------------------------------------------------------- correctness (correctness.py)

def _judged(torch, outs, expected, req: dict, where: str) -> dict:
    """The task's correctness rule, as the request carries it (correctness.for_request)."""
    return correctness.for_request(req)(torch, outs, expected, where)


def _reference_failed(what: str, exc: BaseException, path: str) -> Reject:
    """One line that blames the task's reference (not the kernel): what raised, and where in
    reference.py, without the judge's traceback."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    at = f" at reference.py line {lines[-1]}" if lines else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Reject("reference_error", f"the task's reference failed: {what} raised {type(exc).__name__}{at}"
                                     + (f": {message[:300]}" if message else ""))


def _copy(value):
    return value.clone() if hasattr(value, "clone") else value


# An input at least this large is kept as a keyed fingerprint of its bytes, not a copy:
# KernelBench's level-1 inputs reach 6.4 GB, and the judge, the candidate's sandbox and the
# comparators share one GPU; a host copy, the earlier answer, costs host memory of that size a call.
FINGERPRINT_BYTES = 256 << 20


def _kept(torch, value, limit: int = FINGERPRINT_BYTES):
    """What is kept of an input to find out later whether the kernel changed it
    (correctness.identical): a copy, or the fingerprint of a large tensor, keyed afresh."""
    if hasattr(value, "element_size") and value.numel() * value.element_size() >= limit:
        return correctness.fingerprint(torch, value, secrets.randbits(62))
    return _copy(value)


@dataclass
class _Prepared:
    """One workload x seed: the inputs as make_inputs made them (never handed to a sandbox) and
    the reference's outputs on copies of them (None until a call needed them)."""
    inputs: tuple
    expected: object = None

    @property
    def nbytes(self) -> int:
        return _nbytes(self.inputs) + (0 if self.expected is None else _nbytes(self.expected))


class _ReferenceCache:
    """Prepared inputs and expected outputs by key, least recently used evicted first, at most
    `limit` bytes in all; an entry larger than the limit is not kept."""

    def __init__(self) -> None:
        self.entries: collections.OrderedDict[tuple, _Prepared] = collections.OrderedDict()
        self.sizes: dict[tuple, int] = {}  # as counted when kept: an entry grows once its outputs come
        self.bytes = 0

    def get(self, key: tuple) -> _Prepared | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def _drop(self, key: tuple) -> None:
        if self.entries.pop(key, None) is not None:
            self.bytes -= self.sizes.pop(key)

    def put(self, key: tuple, entry: _Prepared, limit: int) -> bool:
        """Keep (or re-count, once its expected outputs came) `entry`; False: too large to keep."""
        self._drop(key)
        size = entry.nbytes
        if size > limit:
            return False
        while self.entries and self.bytes + size > limit:
            self._drop(next(iter(self.entries)))
        self.entries[key], self.sizes[key] = entry, size
        self.bytes += size
        return True


class Judge(TimingRounds, AutotuneRounds):
    """One request at a time: the reference's inputs and outputs, the checks, the verdict; the
    comparators and the timing rounds are a mixin's (timing_rounds.py), and so is the choice of
    each autotuned kernel's configuration (autotune_rounds.py)."""

    def __init__(self) -> None:
        import torch
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy("file_system")
        self.torch = torch
        self.references: dict = {}
        self.costs_checked: dict[str, dict[str, dict[str, float]]] = {}
        self.prepared = _ReferenceCache()
        self.boxes: Sandboxes | None = None
        self.readable: list[str] = []
        self.seen: set[str] = set()
        self.void: dict[str, str] = {}  # comparators whose comparison the timing rounds voided, and why
        self.phases: dict[str, float] = {}
        self.output_bytes: dict[str, int] = {}  # per workload, what the outputs take (the runner's copy floor)
        self.step, self.step_began = "load", 0.0

    @staticmethod
    def seed(req: dict, phase: str, index: int = 0) -> int:
        """The seed of one phase's index-th draw, from the evaluation's own (seeds.py)."""
        return seeds.derived(req["seed"], phase, index)

    def reference(self, path: str):
        if path not in self.references:
            spec = importlib.util.spec_from_file_location(f"accelopt_reference_{len(self.references)}", path)
            assert spec is not None and spec.loader is not None  # a .py path has both
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except BaseException as exc:  # noqa: BLE001 - the task's file, not the judge, is broken
                raise _reference_failed("importing reference.py", exc, path) from None
            self.references[path] = module
        return self.references[path]

    def inputs(self, ref, req: dict, workload: dict, seed: int):
        try:
            return ref.make_inputs(workload["params"], seed, req["device"], req["dtype"])
        except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
            raise _reference_failed(f"make_inputs (workload {workload['name']}, seed {seed})", exc,
                                    req["reference_path"]) from None

    def expected(self, ref, req: dict, inputs, where: str):
        """The reference's outputs, computed on copies before the kernel sees the inputs."""
        try:
            out = ref.reference(*[_copy(t) for t in inputs])
        except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
            raise _reference_failed(f"reference ({where})", exc, req["reference_path"]) from None
        odd = [type(o).__name__ for o in (out if isinstance(out, (tuple, list)) else [out])
               if not isinstance(o, self.torch.Tensor)]
        if odd:
            raise Reject("reference_error", f"the task's reference failed: reference ({where}) returned "
                                            f"{', '.join(odd)}; it must return a tensor or a tuple of tensors")
        return out

    def prepare(self, ref, req: dict, workload: dict, seed: int, where: str | None = None, expect: bool = True):
        """(inputs, expected) for one workload x seed: fresh inputs and, with `expect`, the reference's
        outputs on copies of them. Both are kept between requests (_ReferenceCache), keyed by the
        reference file and its mtime, device, dtype, workload params and seed; the caller always
        gets clones of kept inputs, since a kernel may write into what it is handed."""
        key = self._key(req, workload, seed)
        entry = self.prepared.get(key) or _Prepared(tuple(self.inputs(ref, req, workload, seed)))
        if expect and entry.expected is None:
            entry.expected = self.expected(ref, req, entry.inputs, where or f"workload {workload['name']} seed {seed}")
        kept = self.prepared.put(key, entry, REFERENCE_CACHE_BYTES.get(req["device"], REFERENCE_CACHE_BYTES["cpu"]))
        inputs = tuple(_copy(t) for t in entry.inputs) if kept else entry.inputs
        return inputs, (entry.expected if expect else None)

    @staticmethod
    def _key(req: dict, workload: dict, seed: int) -> tuple:
        path = req["reference_path"]
        return (path, os.stat(path).st_mtime_ns, req["device"], req["dtype"],
                json.dumps(workload["params"], sort_keys=True), seed)

    def _drawn_expected(self, ref, req: dict, workload: dict, seed: int, tag: str, inputs, where: str):
        """The reference's outputs on a draw made from the task's inputs (`tag` says how), kept
        as the task's own draws' are: each configuration stressed on the draw, and a replay of
        the evaluation's seed, run no reference for it again."""
        key = (*self._key(req, workload, seed), tag)
        entry = self.prepared.get(key)
        if entry is None:
            entry = _Prepared((), self.expected(ref, req, inputs, where))
            self.prepared.put(key, entry, REFERENCE_CACHE_BYTES.get(req["device"], REFERENCE_CACHE_BYTES["cpu"]))
        return entry.expected

    def check_costs(self, ref, req: dict) -> dict[str, dict[str, float]]:
        """flops() and bytes_moved() feed the roofline that can reject a kernel as too fast: each
        must return a finite count >= 0 for every workload. Checked once per reference and workloads;
        returned per workload, so the run's process need not import the reference (and torch)."""
        key = json.dumps([req["reference_path"], req["dtype"], req["workloads"]], sort_keys=True)
        if key in self.costs_checked:
            return self.costs_checked[key]
        costs: dict[str, dict[str, float]] = {}
        for workload in req["workloads"]:
            for name in ("flops", "bytes_moved"):
                what = f"{name}(workload {workload['name']})"
                try:
                    value = float(getattr(ref, name)(workload["params"], req["dtype"]))
                except Exception as exc:  # noqa: BLE001 - the reference's fault, never the kernel's
                    raise _reference_failed(what, exc, req["reference_path"]) from None
                if not 0.0 <= value < float("inf"):  # NaN fails both
                    raise Reject("reference_error", f"the task's reference failed: {what} returned {value}; it must "
                                                    "return a finite count >= 0")
                costs.setdefault(workload["name"], {})[name] = value
        self.costs_checked[key] = costs
        return costs

    def _box_failure(self, f: SandboxFailure, where: str, whose: str = "") -> Reject:
        return Reject(f.status, f"{where}{whose}: {f.error}")

    # -------------------------------------------------------------- evidence

    @staticmethod
    def _foreign(req: dict, seen: list[str], launched: list[str], where: str) -> None:
        """Compute outside the candidate's own Triton launches rejects; data movement is allowed.
        The task's own reference, timed as a kernel (`trusted`), is torch code by design."""
        if req.get("trusted"):
            return
        foreign = foreign_work(req["device"], seen, launched)
        if foreign:
            raise Reject("cheat_suspected", f"{where}: compute outside the Triton launches: "
                         + ", ".join(foreign[:8]) + (" ..." if len(foreign) > 8 else "")
                         + " (only the kernel's Triton kernels and data movement may run)")

    def _check_call(self, box: Sandbox, req, ref, inputs, expected, where: str, deadline: float,
                    threads0: int, errors: dict | None) -> list:
        torch = self.torch
        originals = [_kept(torch, t) for t in inputs]
        try:
            reply = box.request("call", deadline, inputs=list(inputs), where=where, mode=_call_mode(req))
        except SandboxFailure as f:  # the sandbox's own message names the call already (sandbox._invoke)
            raise Reject(f.status, f.error if f.error.startswith(where) else f"{where}: {f.error}") from None
        outs = _owned(torch, reply["outputs"])
        del reply["outputs"]
        self._foreign(req, reply["trace"] or [], reply["known"], where)
        self.seen.update(reply["trace"] or [])
        if reply["threads"] > 0 or (threads0 > 0 and box.threads() > threads0):
            raise Reject("cheat_suspected", f"{where}: the kernel left {max(reply['threads'], 1)} thread(s) "
                                            "running after the call; work must not escape the call")
        if not req.get("trusted"):
            _own_threads(box, req["device"], where)
        worst = _judged(torch, outs, expected, req, where)
        if errors is not None:
            for key, value in worst.items():
                errors[key] = max(errors.get(key, 0.0), value)
        for i, (now, before) in enumerate(zip(inputs, originals)):
            if isinstance(now, torch.Tensor) and not correctness.identical(torch, now, before):
                raise Reject("input_mutated", f"{where}: input {i} was modified by the kernel")
        return outs

    def check(self, box, req, ref, drawn, deadline, errors=None, twice: bool = False) -> int:
        checked = 0
        threads0 = -1
        for workload in req["workloads"]:
            for seed in drawn:  # the seeds of the input sets to check (not the seeds module)
                where = f"workload {workload['name']} seed {seed}"
                inputs, expected = self.prepare(ref, req, workload, seed, where)  # the reference first, on copies
                self.output_bytes[workload["name"]] = _written_bytes(self.torch, expected)
                outs = self._check_call(box, req, ref, inputs, expected, where, deadline, threads0, errors)
                if threads0 < 0:
                    threads0 = box.threads()
                if twice and checked == 0:  # the same call again must agree with the first
                    before, threads_cpu = box.others(), box.thread_cpu()
                    again = self._check_call(box, req, ref, inputs, expected, where + " (again)", deadline,
                                             threads0, None)
                    if not req.get("trusted"):
                        _same_processes(before, box.others(), where + " (again)")
                        _same_threads(threads_cpu, box.thread_cpu(), where + " (again)")
                    try:  # allclose whatever the task's rule: two calls must agree element by element
                        correctness.AllClose(req["atol"], req["rtol"], req.get("required_matched_ratio"))(
                            self.torch, again, outs, where)
                    except Reject as r:
                        raise Reject("cheat_suspected", f"{where}: outputs differ between identical calls: "
                                                        f"{r.error}") from None
                    del again
                checked += 1
                del inputs, expected, outs
                self._give_back_gpu_memory(req)
        return checked

    def wider(self, box, req, ref, deadline: float) -> str | None:
        """A task may draw only values >= 0 for an input its reference is defined on everywhere
        (KernelBench's torch.rand): a kernel computing abs where the reference is ReLU passes every
        such draw. So per workload, one more draw of the task's own inputs, each floating input
        that came out all >= 0 given random signs; where the reference's outputs on it are finite
        (it is defined there), the kernel must match them. Returns the evidence, or None when no
        input was widened (the task's draws already have both signs)."""
        torch = self.torch
        widened = []
        for workload in req["workloads"]:
            seed = self.seed(req, "widened")
            inputs, _ = self.prepare(ref, req, workload, seed, expect=False)
            flipped = [_signed(torch, t, self.seed(req, "signs", i)) if _non_negative(torch, t) else None
                       for i, t in enumerate(inputs)]
            if not any(t is not None for t in flipped):
                continue
            inputs = tuple(t if f is None else f for t, f in zip(inputs, flipped))
            where = (f"workload {workload['name']} seed {seed} with the signs of its non-negative inputs "
                     "drawn at random")
            try:
                expected = self.expected(ref, req, inputs, where)
            except Reject:
                continue  # the reference is not defined there: nothing to hold the kernel to
            if not _finite(torch, expected):
                continue
            try:
                # Signs bring cancellation: sums near zero, where any other order of float
                # arithmetic misses the task's tolerance (set for its own draws). What the
                # reference's own order costs here, measured against float64, widens atol.
                self._held_to(box, req, ref, inputs, expected, where, deadline,
                              lambda i=inputs, e=expected: self.own_rounding(ref, req, i, e), "against float64")
            except Reject as r:
                if r.status in ("wrong_output", "nan", "shape_mismatch", "dtype_mismatch"):
                    raise Reject(r.status, f"correct on the task's own draws (every value >= 0 in some inputs), "
                                           f"wrong where the reference is defined too: {r.error}") from None
                raise
            widened.append(workload["name"])
            del inputs, expected
            self._give_back_gpu_memory(req)
        return (f"correct with signed values in the inputs the task draws only >= 0 ({', '.join(widened)})"
                if widened else None)

    def _held_to(self, box, req: dict, ref, inputs, expected, where: str, deadline: float, rounding, how: str) -> None:
        """One checked call on a draw beyond the task's own. Where it fails by value, what the
        reference's own arithmetic costs on this draw (`rounding()`, None where it cannot be told)
        widens atol to ROUNDING_SLACK times it, and the kernel is judged once more."""
        try:
            self._check_call(box, req, ref, inputs, expected, where, deadline, -1, None)
        except Reject as r:
            slack = rounding() if r.status == "wrong_output" else None
            if not slack or slack * ROUNDING_SLACK <= (req.get("atol") or 0.0):
                raise
            atol = slack * ROUNDING_SLACK
            self._check_call(box, {**req, "atol": atol}, ref, inputs, expected,
                             f"{where}, atol widened to {atol:.3g} ({ROUNDING_SLACK:g}x the reference's own "
                             f"rounding, {slack:.3g} {how})", deadline, -1, None)

    # -------------------------------------------------------------- stress draws (stress_draws.py)

    def stress(self, box, req, ref, deadline: float, configuration: str = "") -> list[str]:
        """The stress draws (stress_draws.py) of one draw of the task's inputs, on its smallest
        workload: every plain float input scaled to a large magnitude, shifted far from zero,
        constant along its rows, one-hot along them. Where the reference's outputs are finite (it
        is defined there), the kernel must match them; where the task's tolerance is finer than
        the reference's own arithmetic there (against float64, and with its inputs moved by an
        ulp), it widens as on the signed draw. `configuration`: the autotuned configuration pinned,
        named in a verdict. Returns the draws passed (none: no plain float input)."""
        torch = self.torch
        workload = self._stress_workload(req, ref)
        seed = self.seed(req, "stress")
        base, _ = self.prepare(ref, req, workload, seed, expect=False)
        changed = stress_draws.chosen(torch, base)
        passed: list[str] = []
        done: set[str] = set()
        for magnitude in stress_draws.MAGNITUDES if changed else ():
            for draw in stress_draws.draws(torch, base, changed, seed, magnitude, skip=done):
                where = f"stress draw '{draw.label}' on workload {workload['name']} seed {seed}{configuration}"
                try:
                    expected = self._drawn_expected(ref, req, workload, seed, f"{draw.kind} {magnitude:g}",
                                                    draw.inputs, where)
                except Reject:
                    done.add(draw.kind)  # the reference is not defined there: nothing to hold the kernel to
                    continue
                if not _finite(torch, expected):
                    if draw.kind not in stress_draws.BY_MAGNITUDE:
                        done.add(draw.kind)
                    continue  # overflowed in the reference: the next, smaller magnitude
                done.add(draw.kind)
                self._stressed(box, req, ref, draw, expected, where, deadline, seed)
                passed.append(draw.label)
                del draw, expected
                self._give_back_gpu_memory(req)
        return passed

    def _stressed(self, box, req, ref, draw, expected, where: str, deadline: float, seed: int) -> None:
        def rounding() -> float | None:
            own = self.own_rounding(ref, req, draw.inputs, expected)
            moved = self._sensitivity(ref, req, draw, expected, seed)
            return None if own is None and moved is None else max(own or 0.0, moved or 0.0)

        try:
            self._held_to(box, req, ref, draw.inputs, expected, where, deadline, rounding,
                          "against float64 or with its inputs moved by an ulp")
        except Reject as r:
            if r.status in ("wrong_output", "nan", "shape_mismatch", "dtype_mismatch"):
                raise Reject(r.status, f"correct on the task's own draws, wrong on a stress draw where the "
                                       f"reference's outputs are finite: {r.error}", **r.extra) from None
            raise

    def _stress_workload(self, req: dict, ref) -> dict:
        """The workload the stress draws run on: the one that moves the fewest bytes (each draw
        costs a reference run and a checked call)."""
        costs = self.check_costs(ref, req)
        return min(req["workloads"], key=lambda w: costs.get(w["name"], {}).get("bytes_moved", 0.0))

    def _sensitivity(self, ref, req: dict, draw, expected, seed: int) -> float | None:
        """How far the reference's outputs move when the draw's changed inputs move by about an
        ulp of their dtype (stress_draws.perturbed): what an honest kernel that rounds an
        intermediate to the inputs' dtype may be off by, where the reference is ill-conditioned
        (a softmax of logits in the thousands). None where it cannot be told."""
        try:
            moved = ref.reference(*stress_draws.perturbed(self.torch, draw.inputs, draw.changed, seed))
            return self._worst_difference(expected, moved)
        except Exception:  # noqa: BLE001 - out of memory: judged on the task's tolerance alone
            return None
        finally:
            self._give_back_gpu_memory(req)

    def stress_configurations(self, box, req, ref, deadline: float,
                              record: AutotuneRecord | None) -> tuple[list[str], int]:
        """The stress draws for every configuration of every autotuned kernel the judge chose
        among (checked on the interpreter, timed on a GPU: any of them may run elsewhere), the
        others held at their choice; then the choice pinned again. Without such a choice, the
        draws once, as pinned. Returns (the draws passed, configurations stressed)."""
        tuned = [k for k in record["kernels"] if k["controlled"] and len(k["configs"]) > 1] if record else []
        if not record or not tuned or record["how"] not in ("checked", "timed"):
            return self.stress(box, req, ref, deadline), 0
        held = pins(record)
        passed, count = [], 0
        try:
            for k in tuned:
                for i in range(len(k["configs"])):
                    if str(i) in (k.get("failed") or {}):
                        continue  # cannot run on this GPU (OutOfResources): left out of the choice too
                    box.request("pin", deadline, choices={**held, k["kernel"]: {"*": i}})
                    passed = self.stress(box, req, ref, deadline, f", {self._configuration(k, i)}")
                    count += 1
        finally:
            box.request("pin", deadline, choices=held)
        return passed, count

    def own_rounding(self, ref, req: dict, inputs, expected) -> float | None:
        """The largest difference between the reference's outputs and the same reference run on
        float64 copies of its floating inputs: the rounding its own order of arithmetic makes on
        these inputs. None where it cannot be told (the reference fails or runs out of memory in
        float64, or its outputs differ in number or shape)."""
        torch = self.torch
        narrow = (torch.float16, torch.bfloat16, torch.float32)
        try:
            wide = [t.double() if isinstance(t, torch.Tensor) and t.dtype in narrow else t for t in inputs]
            exact = ref.reference(*wide)
            del wide
            return self._worst_difference(expected, exact)
        except Exception:  # noqa: BLE001 - out of memory, or a reference that needs its own dtype
            return None
        finally:
            self._give_back_gpu_memory(req)

    def _worst_difference(self, expected, other) -> float | None:
        """The largest finite difference between two sets of the reference's outputs, floating ones
        only; None where they differ in number or shape."""
        torch = self.torch
        outs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        others = list(other) if isinstance(other, (tuple, list)) else [other]
        if len(outs) != len(others):
            return None
        worst = 0.0
        for o, e in zip(outs, others):
            if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
                continue
            if not isinstance(e, torch.Tensor) or e.shape != o.shape:
                return None
            for a, b in zip(o.reshape(-1).split(1 << 24), e.reshape(-1).split(1 << 24)):  # 128 MB at a time
                d = (a.double() - b.double()).abs()
                d = d[torch.isfinite(d)]
                worst = max(worst, float(d.max()) if d.numel() else 0.0)
        return worst

    def _give_back_gpu_memory(self, req: dict) -> None:
        """What this process's caching allocator freed goes back to the GPU: the sandboxes, in other
        processes, allocate from the same device. Inputs handed to a sandbox stay allocated here
        until it lets go of them and this process collects them (torch's CUDA IPC)."""
        if req["device"] == "cuda":
            self.torch.cuda.ipc_collect()
            self.torch.cuda.empty_cache()

    def ghost(self, box, req, ref, deadline) -> str:
        """With every Triton launch stubbed out, a kernel whose outputs are still correct did its
        work somewhere else. Skipped where a stub could pass honestly (outputs all zero)."""
        torch = self.torch
        workload = req["workloads"][0]
        inputs, expected = self.prepare(ref, req, workload, self.seed(req, "ghost"), "ghost replay")
        refs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        if any(bool((correctness.bits(torch, r) == 0).all()) for r in refs if isinstance(r, torch.Tensor)):
            return "ghost replay skipped: a reference output is all zeros"
        try:
            reply = box.request("call", deadline, inputs=list(inputs), mode="ghost", where="ghost replay")
        except SandboxFailure:
            return "ghost replay: the kernel fails with its launches stubbed out"
        if not reply["launched"]:
            raise Reject("cheat_suspected", "no Triton kernel was launched by the call (launches stubbed: "
                                            "nothing to stub); the work must run in a Triton kernel")
        try:
            _judged(torch, _owned(torch, reply["outputs"]), expected, req, "ghost replay")
        except Reject:
            return f"ghost replay: outputs wrong with the launches of {', '.join(reply['launched'])} stubbed out"
        raise Reject("cheat_suspected", f"outputs still correct with the Triton launches stubbed out "
                                        f"({', '.join(reply['launched'])}): the work is done outside Triton")

    # -------------------------------------------------------------- one request

    def evaluate(self, req: dict) -> dict:
        req.setdefault("seed", seeds.draw())  # a request written by hand: drawn here, out of the candidate's reach
        ref = self.reference(req["reference_path"])  # a broken task fails before any sandbox starts
        costs = self.check_costs(ref, req)
        try:  # the task's rule exists (tools/task.py validates it; a hand-written request may not)
            correctness.for_request(req)
        except correctness.UnknownCorrectness as exc:
            raise Reject("reference_error", f"the task's correctness rule: {exc}") from None
        if self.boxes is None:
            self.boxes = Sandboxes(req["device"], confined=not confine.unconfined())
        self.readable = readable = readable_for(req)
        deadline = time.monotonic() + req["timeout_s"]
        self.seen, self.output_bytes = set(), {}
        box = self.boxes.take(readable)
        if req.get("triton_cache"):
            box.seed_cache(req["triton_cache"])
        self.phases = {}  # seconds per finished step: where an evaluation's time goes
        self.step, self.step_began = "load", time.monotonic()
        try:
            return {**self._evaluate(box, req, ref, deadline), "costs": costs, "seed": req["seed"]}
        except (Reject, SandboxFailure) as failure:
            if failure.status == "timeout":  # which step ran out of time, and what the others took
                failure.error += f" ({self._progress(req['timeout_s'])})"
            raise
        finally:  # its processes killed now, its exit awaited beside the next request
            self.boxes.end(box, keep_cache=req.get("keep_cache"))

    def _next_step(self, name: str) -> None:
        now = time.monotonic()
        self.phases[self.step] = round(now - self.step_began, 3)
        self.step, self.step_began = name, now

    def _progress(self, limit_s: float) -> str:
        done = ", ".join(f"{name} {s:.1f} s" for name, s in self.phases.items()) or "none"
        return (f"limit {limit_s:.0f} s; ran out in step {self.step!r} after "
                f"{time.monotonic() - self.step_began:.1f} s; finished steps: {done}")

    def _checks(self, box: Sandbox, req: dict, ref, deadline: float,
                tuned: AutotuneRecord | None = None) -> tuple[list[str], int, dict]:
        """Correctness on fresh inputs, twice, outputs poisoned; the signed and stress draws (every
        autotuned configuration chosen among: `tuned`, the candidate's record); then the ghost
        replay and the trace checks (not for the trusted reference). Returns (evidence, input sets
        checked, errors)."""
        evidence = []
        drawn = [self.seed(req, "check", s) for s in range(req["seeds"])]
        errors: dict = {}
        checked = self.check(box, req, ref, drawn, deadline, errors, twice=True)
        evidence.append(f"correct on {checked} fresh input sets, outputs poisoned, inputs unchanged, "
                        "identical calls agree")
        if not req.get("trusted"):
            widened = self.wider(box, req, ref, deadline)
            if widened:
                evidence.append(widened)
            evidence += _stress_evidence(*self.stress_configurations(box, req, ref, deadline, tuned))
        if not req.get("trusted"):
            self._next_step("ghost")
            evidence.append(self.ghost(box, req, ref, deadline))
            evidence.append("every checked call traced: no compute outside the kernel's Triton launches "
                            "and data movement; no work in other processes")
        return evidence, checked, errors

    def _evaluate(self, box: Sandbox, req: dict, ref, deadline: float) -> dict:
        try:
            box.load(req["source_path"], req["entry_point"], deadline)
        except SandboxFailure as f:
            raise Reject(f.status, f.error) from None
        self._next_step("autotune")
        given = req.get("autotune_pins") or {}
        tuned = {"candidate": self.autotune(box, req, ref, deadline, given=given.get("candidate"))}
        self._next_step("checks")
        # The comparators load and make their first calls (compiling their kernels) while the
        # candidate is checked: nothing is timed until every one of them has answered.
        boxes = {"candidate": box, **({} if req.get("check_only") else self._start_comparators(req, ref, deadline))}
        # A candidate that fails leaves them owing answers: the next request reads those first.
        evidence, checked, errors = self._checks(box, req, ref, deadline, tuned["candidate"])
        if req.get("check_only"):
            self._next_step("done")
            return {"status": "verified", "error": None, "checks": checked, "evidence": evidence,
                    "phases_s": self.phases, "autotune": _recorded(tuned)}
        self._next_step("comparators")
        self._await_comparators(boxes, deadline)
        tuned.update(self._autotune_comparators(boxes, req, ref, deadline, given))
        self._next_step("timing")
        timings, rounds = self.timing(boxes, req, ref, deadline)
        self._next_step("after_check")
        evidence.append("timed calls checked against the judge's own expected outputs")
        try:  # the same process, after all the timed calls, on inputs it has never seen
            self.check(box, req, ref, [self.seed(req, "after_check")], deadline)
        except Reject as r:
            if r.status == "reference_error":
                raise
            raise Reject("cheat_suspected", f"correct before timing but not after it ({r.status}): {r.error}") from None
        self._next_step("done")
        torch = self.torch
        device_name = torch.cuda.get_device_name() if req["device"] == "cuda" else "cpu (Triton interpreter)"
        return {"status": "verified", "error": None, "checks": checked, "timings": timings["candidate"], **errors,
                "compare": {k: v for k, v in timings.items() if k not in ("candidate", COPY)},
                "copy": timings.get(COPY, {}), "device_name": device_name, "rounds": rounds,
                "evidence": evidence, "kernels_seen": sorted(self.seen), "phases_s": self.phases,
                "autotune": _recorded(tuned), "void": self.void, "output_bytes": self.output_bytes}

    def _autotune_comparators(self, boxes: dict, req: dict, ref, deadline: float,
                              given: dict) -> dict[str, AutotuneRecord | None]:
        """Each comparator's autotuned configurations, chosen as the candidate's are (their outputs
        trusted, not checked); a comparator's sandbox kept from an earlier request keeps its choice."""
        out: dict[str, AutotuneRecord | None] = {}
        for name, other in boxes.items():
            if name in ("candidate", COPY):
                continue
            record = getattr(other, "autotune_record", None) if given.get(name) is None else None
            if record is None:
                try:
                    record = self.autotune(other, req, ref, deadline, given=given.get(name), check=False)
                except SandboxFailure as f:
                    raise Reject(f.status, f"comparator {name!r} (not the kernel under test): {f.error}") from None
                other.autotune_record = record
            out[name] = record
        return out


def _recorded(tuned: dict[str, AutotuneRecord | None]) -> dict[str, AutotuneRecord]:
    """The autotune records of the functions that have autotuned kernels."""
    return {name: record for name, record in tuned.items() if record}


def _non_negative(torch, t) -> bool:
    """A float input of the usual widths (not fp8/fp4: their comparisons and products are not
    defined everywhere) whose every value is >= 0, some > 0."""
    if not (isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
            and t.numel() > 1):
        return False
    return bool((t >= 0).all()) and bool((t > 0).any())


def _signed(torch, t, seed: int):
    """`t` with each value's sign drawn at random, the same draw for the same seed. Made on the
    tensor's own device in its own dtype, one extra tensor of its size at most (a KernelBench
    input is 6 GB: an int64 mask on the host would be 48)."""
    generator = torch.Generator(device=t.device).manual_seed(seed)
    out = torch.empty_like(t).bernoulli_(0.5, generator=generator)
    return out.mul_(2).sub_(1).mul_(t)


def _written_bytes(torch, expected) -> int:
    """The bytes the reference's outputs occupy: what any kernel must write (an expanded output
    counts its storage, not its repeated elements)."""
    values = expected if isinstance(expected, (tuple, list)) else [expected]
    return sum(min(v.numel() * v.element_size(), v.untyped_storage().nbytes())
               for v in values if isinstance(v, torch.Tensor))


def _stress_evidence(passed: list[str], configurations: int) -> list[str]:
    if not passed:
        return []
    every = f", each of {configurations} autotuned configurations" if configurations else ""
    return [f"correct on stress draws inside the reference's finite range{every}: {'; '.join(passed)}"]


def _finite(torch, value) -> bool:
    values = value if isinstance(value, (tuple, list)) else [value]
    return all(not (isinstance(v, torch.Tensor) and v.is_floating_point()) or bool(torch.isfinite(v).all())
               for v in values)


def readable_for(req: dict) -> list[str]:
    """Every sandbox may read the task's folder: the task's reference, timed as a comparator,
    loads from it."""
    return [os.path.dirname(os.path.abspath(req["reference_path"]))]


def _spares_for_first_request(boxes: Sandboxes) -> tuple[threading.Thread, list[str]]:
    """Reads the first request (the run writes it as it starts the judge) and forks the sandboxes
    it needs as soon as the template is ready, while the judge imports torch: a sandbox's first
    CUPTI trace alone took 6 s on an H100. Returns the thread and where the line will be."""
    first: list[str] = []

    def read() -> None:
        first.append(sys.stdin.readline())
        try:  # the candidate's, each comparator's and the copy yardstick's, all starting CUPTI at once
            req = json.loads(first[0])
            needed = 1 + len(req.get("compare") or {}) + bool(req.get("copy_yardstick"))
            boxes.top_up(readable_for(req), min(needed, 4))
        except Exception:  # noqa: BLE001 - the request is judged, and its sandboxes made, as without this
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, first


def serve() -> None:
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watch_parent():  # the run's death, kill -9 included, ends the judge and its sandboxes
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch_parent, daemon=True).start()
    # A Ctrl-C reaches the whole process group: the run decides (the CLI kills its judges and
    # exits), so an evaluation it cuts off is never reported as the kernel's failure. Ignored
    # here, it stays ignored in the sandboxes too (they inherit it), which die with the judge.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The template imports torch and Triton while the judge does (two cores, half the wait).
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    boxes = Sandboxes(device, confined=not confine.unconfined())
    early, first = _spares_for_first_request(boxes)
    judge = Judge()
    judge.boxes = boxes
    early.join()
    for line in itertools.chain(first, sys.stdin):
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            result = judge.evaluate(req)
        except Reject as r:
            result = {"status": r.status, "error": _tail(r.error), **r.extra, "seed": req.get("seed")}
        except SandboxFailure as f:
            result = {"status": f.status, "error": _tail(f.error), "seed": req.get("seed")}
        except BaseException:  # noqa: BLE001 - report, never hang the parent
            result = {"status": "runtime_error", "error": _tail("the judge failed:\n" + traceback.format_exc()),
                      "restart": True}
        results.write(RESULT_MARK + req["nonce"] + json.dumps(result) + "\n")
        results.flush()
        if result.get("restart"):
            break
    if judge.boxes is not None:
        judge.boxes.close()


if __name__ == "__main__":
    serve()
