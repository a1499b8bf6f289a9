"""The candidate's side of the trust boundary: one process that runs one kernel module.

Forked by the sandbox template (zygote.py) for the judge (judge.py), with a scrubbed environment,
its own working directory and Triton cache, confined (confine.py: bubblewrap's namespaces, then
Landlock: it writes only beneath its own folder). It talks to the judge over its socket:
requests and replies are pickles, tensors travel as shared memory (CUDA IPC on a GPU, /dev/shm
on the interpreter), never copied.

Nothing here is trusted. The kernel runs in this process and may patch anything in it, this
file included; so the process holds no reference, no expected output and no verdict, serves
exactly one candidate and is then killed. What it reports (outputs, the kernels it launched, its
timings) is evidence the judge checks against its own view, never a verdict.

It imports nothing from accelopt, so a candidate cannot reach the harness through sys.modules.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, NamedTuple

ERROR_CHARS = 1500
FLUSH_BYTES = 256 * 2**20  # larger than any L2: zeroing it before each timed call leaves L2 cold


class Failure(Exception):
    def __init__(self, status: str, error: str, cuda_fault: bool = False):
        super().__init__(error)
        self.status, self.error, self.cuda_fault = status, error, cuda_fault


def _tail(text: str, limit: int = ERROR_CHARS) -> str:
    """Both ends of a long error: where it started and where it ended up. (judge.py has the
    same helper: this process imports nothing of ours.)"""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + "\n...\n" + text[-(limit - head):]


def classify(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, SyntaxError) or (type(exc).__module__ or "").startswith("triton.compiler") \
            or name in ("CompilationError", "OutOfResources"):
        return "compile_error"
    return "runtime_error"


def cuda_fault(exc: BaseException) -> bool:
    text = str(exc)
    return any(s in text for s in ("CUDA error", "illegal memory access", "CUDA_ERROR", "unspecified launch failure"))


GRAPH_REPLAY = "a CUDA graph replay"


class Launches:
    """Every Triton launch goes through JITFunction.run (InterpretedFunction.run on the
    interpreter); autotune and heuristics wrappers call it too. The hook records which kernels a
    call launched, marks them in the profiler trace on the interpreter, and can stub them out
    ("ghost replay"). On a GPU a CUDA graph's replay is a launch too (of the Triton kernels it
    captured, which never pass JITFunction.run again): recorded and stubbed alike, so a kernel
    that replays a graph is judged on the same evidence.

    On a GPU the launch is not annotated: the judge reads GPU activity only, and a
    record_function per launch is host time that torch.compile's launcher (which does not go
    through JITFunction.run) never pays, so it would slow every multi-kernel candidate against
    its comparators in the timed calls."""

    def __init__(self, torch, interpreter: bool):
        if interpreter:
            from triton.runtime.interpreter import InterpretedFunction as cls
        else:
            from triton.runtime.jit import JITFunction as cls
        self.cls, self.original, self.torch = cls, cls.run, torch
        self.names: list[str] = []      # launched by the current request
        self.ever: set[str] = set()      # launched by this module so far (a CUDA graph replays them)
        self.stub = False
        self.annotate = interpreter  # the interpreter's trace tells our launches from host ops by it
        self.hooks = Hooks(torch, annotate=interpreter)
        hook = self

        def run(self_fn, *args, **kwargs):
            name = getattr(self_fn, "__name__", None) or getattr(self_fn.fn, "__name__", "?")
            hook.names.append(name)
            hook.ever.add(name)
            if hook.stub:
                return None
            pre_run = getattr(self_fn, "pre_run_hooks", None)
            if pre_run:  # Triton calls them inside the launch: guarded for this launch
                self_fn.pre_run_hooks = [hook.hooks.wrap(h, f"a pre-run hook of {name}") for h in pre_run]
            try:
                if not hook.annotate:
                    return hook.original(self_fn, *args, **kwargs)
                with torch.profiler.record_function(LAUNCH):
                    return hook.original(self_fn, *args, **kwargs)
            finally:
                if pre_run:
                    self_fn.pre_run_hooks = pre_run

        self.hook = run
        cls.run = run
        self.graph_cls = None if interpreter else torch.cuda.CUDAGraph
        if self.graph_cls is not None:
            self.original_replay = self.graph_cls.replay

            def replay(graph):
                hook.names.append(GRAPH_REPLAY)
                if hook.stub:
                    return None
                return hook.original_replay(graph)

            self.replay_hook = replay
            self.graph_cls.replay = replay

    def intact(self) -> bool:
        return self.cls.run is self.hook and (self.graph_cls is None or self.graph_cls.replay is self.replay_hook)


def _tensors(values, torch) -> list:
    """The tensors among a hook's arguments (a dict of named arguments included)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, dict):
            out += _tensors(list(v.values()), torch)
        elif isinstance(v, (list, tuple)):
            out += _tensors(list(v), torch)
    return out


def _storage_bytes(torch, t):
    """A host copy of the bytes of the whole storage under `t`: a kernel reads through pointers,
    beyond its view too. Data movement only (set_, a device-to-host copy, numpy), so a traced call
    shows nothing of it."""
    whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    return whole.cpu().numpy().copy()


class Hooks:
    """Candidate code Triton runs around a launch: a JITFunction's pre_run_hooks, an autotuner's
    pre_hook and post_hook, a configuration's pre_hook, prune_configs_by (early_config_prune,
    perf_model). Each runs under the HOOK marker (torch ops in it are compute outside the launch,
    even where Triton calls it inside one), and in checked calls (`checking`) what it writes into
    the memory of its tensor arguments is compared: an honest hook resets buffers (zero_, a fill
    of -inf), the same value every call; a hook that writes values that vary computed part of the
    answer outside Triton, in torch, numpy or plain Python alike (`wrote`)."""

    def __init__(self, torch, annotate: bool):
        self.torch, self.annotate = torch, annotate
        self.checking = False
        self.fills: dict[tuple[str, int], bytes] = {}  # (hook, storage) -> the value it filled with
        self.wrote: list[str] = []                       # what hooks did in checked calls

    def wrap(self, fn, what: str):
        if fn is None or getattr(fn, "_accelopt_hook", False):
            return fn
        hooks = self

        def guarded(*args, **kwargs):
            return hooks.run(fn, what, args, kwargs)

        guarded._accelopt_hook = True  # type: ignore[attr-defined]  # a function's own attribute: wrapped once
        return guarded

    def run(self, fn, what: str, args, kwargs):
        torch = self.torch
        tensors = _tensors([*args, *kwargs.values()], torch) if self.checking else []
        storages: dict[int, Any] = {}
        for t in tensors:
            storages.setdefault(t.untyped_storage().data_ptr(), t)
        before = [(t, _storage_bytes(torch, t)) for t in storages.values()]
        with torch.profiler.record_function(HOOK) if self.annotate else contextlib.nullcontext():
            out = fn(*args, **kwargs)
        for i, (t, old) in enumerate(before):
            self._compare(what, i, t, old, _storage_bytes(torch, t))
        return out

    def _compare(self, what: str, i: int, t, old, new) -> None:
        import numpy as np

        if old.shape != new.shape or np.array_equal(old, new):
            return
        size = t.element_size() if old.size % t.element_size() == 0 else 1
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size, np.uint8)
        old, new = old.view(width), new.view(width)
        written = new[old != new]
        value = written[:1].tobytes()
        if bool((written != written[0]).any()):
            self.wrote.append(f"{what} wrote {written.size} differing values into a tensor argument")
        elif self.fills.setdefault((what, i), value) != value:
            self.wrote.append(f"{what} filled a tensor argument with a value that changes from call to call")

    def install(self, tuner) -> list:
        """Guard an autotuner's hooks for one call; returns what to restore."""
        saved = [(tuner, n, getattr(tuner, n, None)) for n in ("early_config_prune", "perf_model")]
        if getattr(tuner, "user_defined_pre_hook", False):
            saved.append((tuner, "pre_hook", tuner.pre_hook))
        if getattr(tuner, "user_defined_post_hook", False):
            saved.append((tuner, "post_hook", tuner.post_hook))
        saved += [(c, "pre_hook", c.pre_hook) for c in tuner.configs if getattr(c, "pre_hook", None)]
        for owner, name, fn in saved:
            if fn is not None:
                setattr(owner, name, self.wrap(fn, f"the autotuner's {name} of {AutotuneControl.kernel_name(tuner)}"))
        return saved

    @staticmethod
    def restore(saved: list) -> None:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def watched(torch) -> dict:
    """Objects a cheating kernel would patch to fool timing or checking in this process."""
    import triton.testing
    from triton.runtime.autotuner import Autotuner

    out = {"time.perf_counter": time.perf_counter, "time.time": time.time, "time.monotonic": time.monotonic,
           "torch.empty": torch.empty, "torch.empty_like": torch.empty_like, "torch.allclose": torch.allclose,
           "torch.equal": torch.equal, "torch.Tensor.__eq__": torch.Tensor.__eq__,
           "torch.Tensor.double": torch.Tensor.double, "torch.Tensor.clone": torch.Tensor.clone,
           "torch.Tensor.copy_": torch.Tensor.copy_,  # how a checked timed call's outputs reach the judge
           "torch.profiler.profile": torch.profiler.profile,
           "torch.autograd.profiler.profile": torch.autograd.profiler.profile,  # host_profile
           "triton.testing.do_bench": triton.testing.do_bench,
           "threading.active_count": threading.active_count,
           "triton's Autotuner.run": Autotuner.run,  # the judge's choice of configuration (AutotuneControl)
           # present on CPU builds too: patching them shows intent even where they time nothing
           "torch.cuda.Event": torch.cuda.Event, "torch.cuda.synchronize": torch.cuda.synchronize,
           "torch.cuda.Event.record": getattr(torch.cuda.Event, "record", None),
           "torch.cuda.Event.elapsed_time": getattr(torch.cuda.Event, "elapsed_time", None)}
    return out


def _fits(torch, item, receive: list | None, i: int) -> bool:
    """Whether output `i` can be copied into the judge's buffer `i` as it is: same shape, dtype, device."""
    if receive is None or i >= len(receive) or type(receive[i]) is not torch.Tensor:
        return False
    buf = receive[i]
    return tuple(item.shape) == tuple(buf.shape) and item.dtype == buf.dtype and item.device == buf.device


class Poison:
    """While active, torch.empty* return memory pre-filled with NaN (floats) or a sentinel
    (integers), so an output element the kernel never writes fails the judge's check."""

    NAMES = ("empty", "empty_like", "empty_strided")

    def __init__(self, torch):
        self.torch = torch
        self.saved = {n: getattr(torch, n) for n in self.NAMES}

    def _fill(self, t):
        with self.torch.no_grad():  # libraries allocate leaves that require grad (Inductor's pattern init)
            return self._fill_values(t)

    def _fill_values(self, t):
        if str(t.dtype).startswith("torch.float4_"):  # packed fp4 has no NaN (nor fill_): bytes of (-6, -6)
            t.view(self.torch.uint8).fill_(0xFF)
        elif t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype != self.torch.bool and not t.is_complex():
            t.fill_(self.torch.iinfo(t.dtype).max if t.dtype.is_signed else 123)
        return t

    def __enter__(self):
        for name, fn in self.saved.items():
            setattr(self.torch, name, lambda *a, _fn=fn, **k: self._fill(_fn(*a, **k)))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.torch, name, fn)


MARKER_CYCLES = 1000  # torch's spin kernel, ~1 µs: what closes each timed call on the GPU timeline
# Each timed call is launched while the GPU spins this long (the opening marker): the host runs
# ahead, as in a pipeline whose GPU is busy with the previous layer (or a CUDA graph), so launch
# overhead is hidden wherever the launcher puts it, and host work after a synchronization is not
# (the host waits for the cover first). 100 µs (what do_bench's L2 flush covers) was too short:
# on an H100, torch.compile's call and a seed's launches each took 100-200 µs of host time in the
# sandbox, which then decided the figures. Counted in SM clock cycles: 2e6 is 1 ms at 2 GHz and
# longer at lower clocks (a clock read at start-up, before the GPU ramps up, made it far shorter).
COVER_CYCLES = 2_000_000


def marker_kernel_name(torch) -> str:
    """The GPU name of torch's spin kernel (`torch._C._cuda_sleep`), read once from a trace
    before any candidate is loaded; it opens and closes every timed call."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch._C._cuda_sleep(MARKER_CYCLES)
        torch.cuda.synchronize()
    names = {e.name() for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.CUDA}
    if len(names) != 1:
        raise RuntimeError(f"the timing marker ran as {sorted(names)}, not as one GPU kernel")
    return names.pop()


def gpu_events(prof) -> list[tuple[float, float, str]]:
    """GPU activity (start µs, end µs, name) from the raw Kineto events, in start order (building
    torch's event tree costs more than the calls)."""
    from torch.autograd import DeviceType

    return sorted((e.start_ns() / 1e3, (e.start_ns() + e.duration_ns()) / 1e3, e.name())
                  for e in prof.profiler.kineto_results.events()
                  if e.device_type() == DeviceType.CUDA and not e.name().startswith("accelopt::"))


class TimedCall(NamedTuple):
    opened: float                        # end of the opening marker: the GPU is free for the call
    inside: list[tuple[float, float]]    # the call's GPU activity

    def span(self) -> float:  # methods, not properties: the tamper check watches functions
        """From the moment the GPU could start the call to its last activity: host work the
        cover did not hide counts, before the first kernel as between kernels; work a side
        stream began during the cover counts from its start."""
        return max(b for _, b in self.inside) - min(self.opened, min(a for a, _ in self.inside))

    def busy(self) -> float:
        return sum(b - a for a, b in self.inside)


def calls_between_marks(gpu: list[tuple[float, float, str]], marker: str | None,
                        reps: int) -> tuple[list[TimedCall], list[str]]:
    """Per timed call, its GPU activity, and the names seen. Each call is bracketed by two runs
    of the marker kernel, each after a device-wide synchronization, so nothing else (the L2
    flush, the copy of fresh values, a big fill of the kernel's own) can be taken for part of a
    call or for a boundary. A marker count other than 2 per call (a kernel that runs torch's
    spin kernel itself, or a lossy trace) yields no calls: the judge then falls back to CUDA
    events (from the same start, but blind to other streams)."""
    marks = [k for k, (_, _, name) in enumerate(gpu) if name == marker] if marker else []
    if len(marks) != 2 * reps:
        return [], []
    calls: list[TimedCall] = []
    names: set[str] = set()
    for i in range(reps):
        inside = gpu[marks[2 * i] + 1: marks[2 * i + 1]]
        calls.append(TimedCall(gpu[marks[2 * i]][1], [(a, b) for a, b, _ in inside]))
        names.update(name for _, _, name in inside)
    return calls, sorted(names)


# An autotuned kernel's configurations compiled at once (ptxas runs for seconds each, one core
# each): AccelOpt's gqa_ragged_prefill best has 12; with 8 at a time its cold check spent 98 s in
# two waves of ptxas on a 16-core H100 host. Every core, at most one thread a configuration.
COMPILE_THREADS = os.cpu_count() or 8
# A tuning key the judge can name across processes: values of these types only (repr is stable).
KEY_TYPES = (int, float, bool, str, type(None))


def tuning_key(tuner, args, kwargs) -> tuple:
    """The key Triton's Autotuner.run files a tuning under: the `key` arguments' values, then
    every tensor argument's dtype (triton/runtime/autotuner.py, Autotuner.run)."""
    named = {k: v for k, v in {**dict(zip(tuner.arg_names, args)), **kwargs}.items() if k in tuner.arg_names}
    key = [named[k] for k in tuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def _config_text(config) -> str:
    """A configuration as Triton prints it, without the fields it leaves unset."""
    return ", ".join(p for p in str(config).split(", ") if not p.endswith(": None"))


CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")


def _plain(value) -> Any:
    """A value as the judge may read it: a plain number, string or None as is, anything else as
    its type and text (the judge compares it, it never rebuilds it)."""
    if type(value) in KEY_TYPES:
        return value
    return f"<{type(value).__name__}> {str(value)[:200]}"


def config_fields(config) -> dict:
    """Every field of a triton.Config, as the autotuner runs it: its meta-parameters (`kwargs`), its
    launch fields, and whether it has a pre_hook. The judge pins a configuration by these, and the
    run compares them with the source's literal list before writing one into the source."""
    kwargs = getattr(config, "kwargs", None)
    return {"kwargs": {str(k): _plain(v) for k, v in kwargs.items()} if isinstance(kwargs, dict) else _plain(kwargs),
            **{name: _plain(getattr(config, name, None)) for name in CONFIG_FIELDS},
            "pre_hook": getattr(config, "pre_hook", None) is not None}


def why_not_controlled(tuner) -> str | None:
    """Why the judge leaves this autotuner to choose for itself (None: the judge chooses): what
    runs in its choice is the kernel's own code, which the judge cannot replay config by config."""
    if getattr(tuner, "early_config_prune", None) or getattr(tuner, "perf_model", None):
        return "prune_configs_by (its own code narrows the configurations per call)"
    if getattr(tuner, "user_defined_pre_hook", False) or getattr(tuner, "user_defined_post_hook", False):
        return "a pre_hook or post_hook of the autotuner"
    if any(getattr(c, "pre_hook", None) for c in tuner.configs):
        return "a configuration with a pre_hook"
    return None


class AutotuneControl:
    """The judge's hand on the candidate's @triton.autotune kernels: Triton's autotuner never
    times configurations here (each process's pick was a coin flip between processes); the judge
    does, from its own rounds, and pins what it chose (`pins`: kernel -> tuning key -> index into
    the autotuner's configurations, "*" for a key not named). An autotuner the judge cannot
    replay (prune_configs_by, hooks, a key it cannot name) keeps Triton's own choice.

    On a GPU every configuration of a key is compiled at once before the first call of that key
    (Triton's AsyncCompileMode; compilation and ptxas release the GIL), joined before the call
    goes on so that no thread outlives it. `seen` records, per request, which configuration each
    (kernel, key) ran: evidence for the judge, which decides nothing on it alone."""

    def __init__(self, gpu: bool, threads: int = COMPILE_THREADS):
        from triton.runtime.autotuner import Autotuner

        self.gpu, self.threads = gpu, threads
        self.pins: dict[str, dict[str, int]] = {}
        self.seen: dict[tuple[str, str], int | None] = {}
        self.met: dict[str, Any] = {}          # autotuners by kernel name, as first called
        self.compiled: set[tuple[int, tuple]] = set()
        self.hooks: Hooks | None = None  # the candidate's hooks, guarded while its autotuners run
        self.original = Autotuner.run
        control = self

        def run(tuner, *args, **kwargs):
            return control._run(tuner, args, kwargs)

        Autotuner.run = run
        self.hook = run

    @staticmethod
    def kernel_name(tuner) -> str:
        return getattr(getattr(tuner, "base_fn", None), "__name__", None) or "?"

    def _run(self, tuner, args, kwargs):
        saved = self.hooks.install(tuner) if self.hooks is not None else []
        try:
            return self._choose(tuner, args, kwargs)
        finally:
            Hooks.restore(saved)

    def _choose(self, tuner, args, kwargs):
        name = self.kernel_name(tuner)
        self.met.setdefault(name, tuner)
        if len(tuner.configs) <= 1:
            return self.original(tuner, *args, **kwargs)
        key = tuning_key(tuner, args, kwargs)
        self._compile_together(tuner, key, args, kwargs)
        text = repr(key) if all(type(v) in KEY_TYPES for v in key) else None
        if text is None or why_not_controlled(tuner):
            self.seen[(name, text or "?")] = None  # Triton's own autotuner chooses
            return self.original(tuner, *args, **kwargs)
        chosen = self.pins.get(name, {})
        index = chosen.get(text, chosen.get("*", 0))
        index = index if isinstance(index, int) and 0 <= index < len(tuner.configs) else 0
        tuner.cache[key] = tuner.configs[index]  # Autotuner.run then runs it, timing nothing
        self.seen[(name, text)] = index
        return self.original(tuner, *args, **kwargs)

    def _compile_together(self, tuner, key: tuple, args, kwargs) -> None:
        if not self.gpu or (id(tuner), key) in self.compiled:
            return
        self.compiled.add((id(tuner), key))
        try:
            from concurrent.futures import ThreadPoolExecutor

            from triton.runtime._async_compile import AsyncCompileMode

            with ThreadPoolExecutor(min(self.threads, len(tuner.configs))) as pool, \
                    AsyncCompileMode(pool, ignore_errors=True):
                tuner.warmup(*args, **{k: v for k, v in kwargs.items() if k != "warmup"})
        except Exception:  # noqa: BLE001 - compiled one by one at their first call, as without this
            pass

    def autotuners(self, module) -> list[dict]:
        """Every autotuner of several configurations the module defines (at its top level, or
        behind triton.heuristics) or has called: its kernel, key, configurations, and why the
        judge leaves it alone, if it does. `fields`: each configuration's every field
        (config_fields), what the judge pins and the run compares with the source's list."""
        from triton.runtime.autotuner import Autotuner

        found: dict[str, Any] = dict(self.met)
        for value in list(vars(module).values()):
            inner, depth = value, 0
            while inner is not None and depth < 4 and not isinstance(inner, Autotuner):
                inner, depth = getattr(inner, "fn", None), depth + 1
            if isinstance(inner, Autotuner):
                found.setdefault(self.kernel_name(inner), inner)
        return [{"kernel": name, "key": [str(k) for k in tuner.keys], "configs": [_config_text(c) for c in tuner.configs],
                 "fields": [config_fields(c) for c in tuner.configs], "why": why_not_controlled(tuner)}
                for name, tuner in found.items() if len(tuner.configs) > 1]

    def ran(self) -> list[list]:
        """[kernel, key, configuration index or None (Triton's own choice)] since the last request."""
        out = [[name, key, index] for (name, key), index in self.seen.items()]
        self.seen = {}
        return out


LAUNCH, HOOK = "accelopt::triton_launch", "accelopt::hook"
_NOT_DTYPES = {"", "Scalar", "ScalarList", "TensorList", "GenericList"}


def host_profile(kineto_profile, **options):
    """A host-only (CPU) profiler session: torch.profiler.profile's own Kineto session
    (torch.autograd.profiler.profile, bound by the Sandbox before any candidate loads), opened
    directly. torch.profiler.profile asks `hasattr(torch, "_inductor")` at each start (for a
    cudagraphs setting that a CPU trace never reads), which imports Inductor, dynamo and sympy:
    about 1 s of CPU in every process that traces, for nothing."""
    return kineto_profile(use_cpu=True, use_kineto=True, **options)


def _all_threads():
    """The profiler's setting that records ops on every thread, not only the one that started it."""
    from torch._C._profiler import _ExperimentalConfig

    return _ExperimentalConfig(profile_all_threads=True)


def _op_name(e) -> str:
    """An op with the dtypes of its tensor inputs, written as a GPU kernel's template types
    (`aten::cumsum<double>`): an index op on floating-point values is compute."""
    dtypes = [d for d in (getattr(e, "input_dtypes", None) or []) if d not in _NOT_DTYPES]
    return f"{e.name}<{', '.join(dict.fromkeys(dtypes))}>" if dtypes else e.name


def host_ops(events) -> list[str]:
    """Every host op of a traced call that is not part of a Triton launch: at any depth (under a
    kernel's own record_function too) and on any thread. Each op is reported at its outermost
    level (its children are its own implementation). Candidate hooks (`Hooks`) run inside a launch
    on the interpreter: what they run counts."""
    found: list[str] = []
    todo = [(e, False) for e in events if e.cpu_parent is None]
    while todo:
        e, in_launch = todo.pop()
        if e.name == LAUNCH:
            in_launch = True
        elif e.name == HOOK:
            in_launch = False
        elif not in_launch and not e.is_user_annotation:
            found.append(_op_name(e))
            continue
        todo += [(c, in_launch) for c in e.cpu_children]
    return found


class Sandbox:
    def __init__(self, conn):
        import torch
        import torch.multiprocessing as tmp
        import triton  # noqa: F401 - imported before any candidate, so warm spares pay for it up front

        tmp.set_sharing_strategy("file_system")  # works between unrelated processes
        self.conn, self.torch = conn, torch
        self.kineto = torch.autograd.profiler.profile  # bound before any candidate: one it patches is not used
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.run = None
        self.module = None
        self.flush = None
        self.autotune = AutotuneControl(gpu=self.device == "cuda")
        self._start_torch_threads()
        if self.device == "cuda":
            torch.cuda.init()
            # read before any candidate exists (which also starts CUPTI while this process is a spare)
            self.mark = getattr(torch._C, "_cuda_sleep", None)  # a builtin: a kernel cannot rewrite its code
            try:
                self.marker = marker_kernel_name(torch) if self.mark else None
            except Exception:  # noqa: BLE001 - no CUPTI trace here: calls are timed by CUDA events alone
                self.marker = None

    def _start_torch_threads(self) -> None:
        """Threads torch starts at first use (its intra-op pool, the profiler's own), started now,
        before the thread list the judge takes as its baseline (`tids`): any thread that comes
        later is the candidate's."""
        torch = self.torch
        torch.ones(1 << 20).add_(1).sum()
        if self.device == "cpu":  # on a GPU marker_kernel_name's session starts the profiler
            with host_profile(self.kineto):
                torch.ones(1).add_(1)

    # ------------------------------------------------------------ requests

    def load(self, path: str, entry_point: str) -> dict:
        torch = self.torch
        self.launches = Launches(torch, interpreter=self.device == "cpu")
        self.autotune.hooks = self.launches.hooks
        self.threads = threading.active_count()
        self.original = watched(torch)
        spec = importlib.util.spec_from_file_location("candidate", path)
        assert spec is not None and spec.loader is not None  # a .py path has both
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate"] = module  # Triton's JIT looks the module up while compiling
        try:
            spec.loader.exec_module(module)
            self.run = getattr(module, entry_point)
            self.module = module
        except BaseException as exc:  # noqa: BLE001 - any failure is the candidate's
            raise Failure(classify(exc), "importing the kernel failed:\n" + traceback.format_exc()) from None
        self.integrity("import")
        return {}

    def autotuners(self) -> dict:
        """The module's autotuners of several configurations (AutotuneControl.autotuners)."""
        return {"tuners": self.autotune.autotuners(self.module) if self.module is not None else []}

    def pin(self, choices: dict) -> dict:
        """The configurations later calls run: kernel -> tuning key -> index ("*": any other key)."""
        self.autotune.pins = {str(k): {str(key): int(i) for key, i in v.items()} for k, v in choices.items()}
        self.autotune.seen = {}
        return {}

    def integrity(self, where: str) -> list[str]:
        """Raise on tampering seen in this process; returns nothing useful on success."""
        torch = self.torch
        for name, obj in watched(torch).items():
            if obj is not self.original[name]:
                raise Failure("cheat_suspected", f"{where}: {name} was replaced by the kernel")
        if not self.launches.intact():
            raise Failure("cheat_suspected",
                          f"{where}: triton's JITFunction.run or torch's CUDAGraph.replay was replaced by the kernel")
        return []

    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _invoke(self, inputs, where: str, poison: bool = True):
        """One call; with `poison`, under poisoned allocations. Only calls whose outputs are
        checked need it: torch.compile (a comparator) traces the poisoned torch.empty_like of a
        reference into its graph, and Inductor then refuses to compile it."""
        try:
            with Poison(self.torch) if poison else contextlib.nullcontext():
                out = self.run(*inputs)
            self._sync()
        except Failure:
            raise
        except BaseException as exc:  # noqa: BLE001
            raise Failure(classify(exc), f"{where}:\n" + traceback.format_exc(), cuda_fault(exc)) from None
        return out

    def call(self, inputs, mode: str = "trace", where: str = "call", poison: bool = True) -> dict:
        """One call, profiled (`trace`, the default: every checked call, so that a kernel cannot
        behave only when watched), plain (`normal`), or with every Triton launch stubbed
        (`ghost`); under poisoned allocations unless its outputs go unchecked (`poison`)."""
        self.launches.names = []
        self.autotune.seen = {}
        self.launches.stub = mode == "ghost"
        hooks = self.launches.hooks
        hooks.checking, hooks.wrote = mode == "trace", []
        trace = None
        try:
            if mode == "trace":
                trace = self._traced(inputs, where, poison)
                out = self._last
            else:
                out = self._invoke(inputs, where, poison)
        finally:
            self.launches.stub = hooks.checking = False
        self.integrity(where)
        if hooks.wrote:
            raise Failure("cheat_suspected", f"{where}: compute outside the Triton launches, in a hook: {hooks.wrote[0]} "
                          "(a hook may only reset buffers, to the same value every call)")
        return {"outputs": self._outputs(out), "launched": sorted(set(self.launches.names)),
                "known": sorted(self.launches.ever), "tuned": self.autotune.ran(),
                "threads": threading.active_count() - self.threads, "trace": trace}

    def _traced(self, inputs, where: str, poison: bool = True) -> list[str]:
        """Names of what one call ran outside its Triton launches: GPU kernels on a GPU, host ops
        on the interpreter (where Triton runs on the host: `host_ops`)."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile, record_function

        if self.device == "cuda":  # GPU activity only: a CPU-side trace costs 3x and tells nothing more here
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                self._last = self._invoke(inputs, where, poison)
            return sorted({e.name() for e in prof.profiler.kineto_results.events()
                           if e.device_type() == DeviceType.CUDA})
        # input dtypes (record_shapes); ops on every thread, the kernel's own included
        with host_profile(self.kineto, record_shapes=True, experimental_config=_all_threads()) as prof:
            with record_function("accelopt::call"):
                self._last = self._invoke(inputs, where, poison)
        return host_ops(prof.function_events)

    def time_calls(self, inputs, reps: int, steps: bool = False, receive: list | None = None) -> dict:
        """Per call, on a cold L2, launched while the GPU spins for at least 1 ms (the cover):
        the real span on the GPU (from the end of the cover to the call's last GPU activity:
        copies, and host work the cover did not hide, as after a synchronization, included), the
        summed GPU activity (kernel-only), and CUDA events around the call (the same start, the
        default stream only).

        With `steps`, after each call (untimed) this process tells the judge and waits for its
        word (`_step`): the judge alone decides, once the call is over, whether to read its
        outputs, and writes fresh values into the shared input buffers between calls when it
        chooses. Nothing in this process knows which call will be checked or which inputs are new,
        so no phase, counter or frame here tells a kernel when to behave. `receive`: the judge's
        buffers, shared once per request, into which a checked call's outputs are copied (one
        device copy, not a CUDA handle opened and closed in the judge per checked call). The GPU
        kernels seen are returned too, so every timed round is traced."""
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        if self.flush is None:
            self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
        begin = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        self.launches.names = []
        self.autotune.seen = {}
        out = self._invoke(inputs, "warm-up before timing", poison=False)  # its outputs are not checked
        try:
            # GPU activity only (a CPU-side trace would cost three times as much). Each call is
            # bracketed on the GPU timeline by two marker kernels, each after a synchronization.
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(reps):
                    self.flush.zero_()
                    torch.cuda.synchronize()
                    if self.mark:  # the host launches the call while the GPU spins (the cover)
                        self.mark(COVER_CYCLES)
                    out = None  # one call's outputs alive at a time: a KernelBench output can be 6 GB
                    begin[i].record()
                    out = self.run(*inputs)
                    end[i].record()
                    torch.cuda.synchronize()
                    if self.marker:
                        self.mark(MARKER_CYCLES)
                    if steps:
                        self._step(out, receive)
                torch.cuda.synchronize()
        except Failure:
            raise
        except BaseException as exc:  # noqa: BLE001
            raise Failure(classify(exc), "while timing:\n" + traceback.format_exc(), cuda_fault(exc)) from None
        calls, names = calls_between_marks(gpu_events(prof), self.marker, reps)
        events = [b.elapsed_time(e) * 1e3 for b, e in zip(begin, end)]
        span = [c.span() for c in calls if c.inside]
        busy = [c.busy() for c in calls if c.inside]
        self.integrity("timing")
        return {"span_us": span, "kernel_us": busy, "kernels": names, "launched": sorted(set(self.launches.names)),
                "known": sorted(self.launches.ever), "event_us": events, "tuned": self.autotune.ran(),
                "complete": len(span) == reps,  # every call seen
                "outputs": [] if steps else self._outputs(out)}

    def _step(self, out, receive: list | None = None) -> None:
        """Between two timed calls (untimed): "called" to the judge, then its words: "outputs"
        (hand this call's outputs over: into `receive` where they fit it), "next" (go on; the
        inputs may hold new values now)."""
        self.conn.send(("called", None))
        while True:
            word = self.conn.recv()
            if word == "next":
                return
            if word != "outputs":
                raise Failure("runtime_error", f"the judge's word {word!r} is not a timing step")
            self.conn.send(("outputs", self._outputs(out, receive)))

    def batch(self, inputs, n: int) -> dict:
        """n calls back to back and one synchronization: the judge's wall clock around this
        request is its outside view of the call."""
        for _ in range(n):
            self.run(*inputs)
        self._sync()
        return {}

    # ------------------------------------------------------------ wire

    def _outputs(self, out, receive: list | None = None):
        """Plain tensors travel as tensors; anything else as a description the judge rejects. With
        `receive` (the judge's buffers), a tensor of its buffer's shape and dtype is copied into it
        (the copy_ saved before the kernel loaded) and travels as {"received": its index}."""
        torch = self.torch
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        sent: list = []
        for i, item in enumerate(items):
            if type(item) is torch.Tensor and item.device.type != self.device:
                sent.append({"not_a_tensor": f"a tensor on {item.device.type}", "on": item.device.type})
            elif type(item) is torch.Tensor and _fits(torch, item, receive, i):
                self.original["torch.Tensor.copy_"](receive[i], item)  # type: ignore[index]
                sent.append({"received": i})
            elif type(item) is torch.Tensor:
                sent.append(torch.Tensor.detach(item))  # the class's own: an instance may override it
            else:
                sent.append({"not_a_tensor": type(item).__module__ + "." + type(item).__qualname__,
                             "on": str(getattr(item, "device", ""))})
        if self.device == "cuda" and any(isinstance(s, dict) and "received" in s for s in sent):
            self.original["torch.cuda.synchronize"]()  # copied before the judge reads the buffers
        return sent

    def serve(self, tampered) -> None:
        """`tampered` is a closure made before any kernel was loaded: it is a local of this
        frame, which a kernel cannot rebind, and it checks this file's own functions."""
        while True:
            try:
                op, args = self.conn.recv()
            except (EOFError, OSError):
                return
            try:
                reply: tuple[str, Any] | None = ("ok", getattr(self, op)(**args))
                changed = tampered()
                if changed:
                    raise Failure("cheat_suspected", f"the kernel replaced the sandbox's own {changed}")
            except Failure as f:
                reply = ("fail", {"status": f.status, "error": _tail(f.error), "cuda_fault": f.cuda_fault})
            except BaseException:  # noqa: BLE001 - the kernel may have broken anything
                reply = ("fail", {"status": "runtime_error", "error": _tail(traceback.format_exc()),
                                  "cuda_fault": False})
            try:
                self.conn.send(reply)
            except BaseException:  # noqa: BLE001 - an unsendable reply is the kernel's doing
                self.conn.send(("fail", {"status": "runtime_error", "cuda_fault": False,
                                         "error": _tail("the kernel's outputs could not be handed back:\n"
                                                        + traceback.format_exc())}))
            # Outputs handed to the judge stay alive in torch's IPC limbo until it lets go; what this
            # process cached beyond them goes back to the GPU, which the judge and other boxes share.
            # The judge's inputs too: until this process drops them, the judge cannot free them.
            reply, args, self._last = None, None, None
            if self.device == "cuda":
                self.torch.cuda.empty_cache()


def _die_with_parent() -> None:
    """The judge's death (kill -9 included) ends this process: PR_SET_PDEATHSIG."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except OSError:
        pass


def _own_code() -> list[tuple[object, str, object]]:
    """(owner, name, function) for this file's functions and methods and the connection's:
    what a kernel would replace to forge what the sandbox reports."""
    from multiprocessing.connection import Connection

    module = sys.modules[__name__]
    found: list[tuple[object, str, object]]
    found = [(module, name, obj) for name, obj in vars(module).items()
             if callable(obj) and hasattr(obj, "__code__") and getattr(obj, "__module__", None) == __name__]
    classes = [obj for obj in vars(module).values() if isinstance(obj, type) and obj.__module__ == __name__]
    for cls in [*classes, Connection]:
        found += [(cls, name, obj) for name, obj in vars(cls).items() if hasattr(obj, "__code__")]
    return found


def _tamper_check():
    original = [(owner, name, fn, fn.__code__) for owner, name, fn in _own_code()]

    def tampered() -> str | None:
        for owner, name, fn, code in original:
            if vars(owner).get(name) is not fn or fn.__code__ is not code:
                return f"{getattr(owner, '__name__', '?')}.{name}"
        return None

    return tampered


def serve_fd(fd: int) -> None:
    """Serve the judge on socket `fd` until it hangs up. Called in a process forked from the
    template (zygote.py), which has already confined it."""
    from multiprocessing.connection import Connection

    conn = Connection(socket.socket(fileno=fd).detach())
    # The kernel's own prints go to stderr; the socket is the only channel to the judge.
    sys.stdout = sys.stderr
    try:
        sandbox = Sandbox(conn)
    except BaseException:  # noqa: BLE001
        conn.send(("fail", {"status": "runtime_error", "error": _tail(traceback.format_exc()), "cuda_fault": True}))
        return
    # the threads before any candidate code runs, as this process's PID namespace numbers them
    conn.send(("ready", {"pid": os.getpid(), "tids": sorted(int(t) for t in os.listdir("/proc/self/task"))}))
    sandbox.serve(_tamper_check())
