"""The evaluation worker: a persistent process that checks and times candidates.

Started by pool.py as `python worker.py` with one JSON request per line on stdin; each answer
is one line, prefixed by RESULT_MARK and the request's nonce, on a private copy of the
original stdout. The candidate's own prints go to stderr, so it cannot forge a verdict by
printing. It imports nothing from accelopt, so it runs in a scrubbed environment from its own
working directory with its own Triton cache.

A request evaluates one candidate:
1. load the reference (cached) and the candidate (a fresh module each time);
2. correctness on every workload x seed: the reference first on copies of the inputs; the
   candidate's allocations pre-filled with poison; shape, dtype, NaN/Inf, tolerance, input
   mutation; library and timer integrity and thread count checked after every call;
3. timing: the candidate interleaved with its comparators (parent, baseline) in rounds, each a
   do_bench run (cold L2, CUDA events), plus kernel-only CUPTI time where launches dominate.
After a CUDA error the context is poisoned: the answer asks the pool to restart this process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import threading
import time
import traceback

# Run as a script, this file's folder heads sys.path; drop it so that our module names can
# never shadow the standard library inside the worker.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

RESULT_MARK = "@@ACCELOPT_RESULT@@"
ERROR_CHARS = 1500
_REFERENCES: dict = {}
_counter = [0]


class Reject(Exception):
    """A verdict reached inside evaluation: status plus message (and extra fields)."""

    def __init__(self, status: str, error: str, **extra):
        super().__init__(error)
        self.status, self.error, self.extra = status, error, extra


def _tail(text: str, limit: int = ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT looks the module up while compiling
    spec.loader.exec_module(module)
    return module


def _classify(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, SyntaxError) or (type(exc).__module__ or "").startswith("triton.compiler") \
            or name in ("CompilationError", "OutOfResources"):
        return "compile_error"
    return "runtime_error"


def _cuda_fault(exc: BaseException) -> bool:
    text = str(exc)
    return "CUDA error" in text or "illegal memory access" in text or "CUDA_ERROR" in text \
        or "unspecified launch failure" in text


# ---------------------------------------------------------------- integrity and poison

def _watched(torch):
    """Objects a cheating kernel would patch to fool timing or checking."""
    import triton.testing

    return {
        "time.perf_counter": time.perf_counter, "time.time": time.time, "time.monotonic": time.monotonic,
        "torch.cuda.Event": torch.cuda.Event, "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event.record": getattr(torch.cuda.Event, "record", None),
        "torch.cuda.Event.elapsed_time": getattr(torch.cuda.Event, "elapsed_time", None),
        "triton.testing.do_bench": triton.testing.do_bench, "torch.allclose": torch.allclose,
        "torch.equal": torch.equal, "torch.Tensor.__eq__": torch.Tensor.__eq__,
        "torch.empty": torch.empty, "torch.empty_like": torch.empty_like,
    }


def _check_integrity(torch, original: dict, threads_before: int, where: str) -> None:
    for name, obj in _watched(torch).items():
        if obj is not original[name]:
            raise Reject("cheat_suspected", f"{where}: {name} was replaced by the kernel", restart=True)
    if threading.active_count() > threads_before:
        raise Reject("cheat_suspected", f"{where}: the kernel started {threading.active_count() - threads_before} "
                                        "thread(s); work must not escape the timed call", restart=True)


class _Poison:
    """While active, torch.empty* return memory pre-filled with NaN (floats) or a sentinel
    (integers), so an output element the kernel never writes fails the check."""

    NAMES = ("empty", "empty_like", "empty_strided")

    def __init__(self, torch):
        self.torch = torch
        self.saved = {n: getattr(torch, n) for n in self.NAMES}

    def _fill(self, t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype != self.torch.bool:
            t.fill_(self.torch.iinfo(t.dtype).max if t.dtype.is_signed else 123)
        return t

    def __enter__(self):
        for name, fn in self.saved.items():
            setattr(self.torch, name, lambda *a, _fn=fn, **k: self._fill(_fn(*a, **k)))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.torch, name, fn)


# ---------------------------------------------------------------- correctness

def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _compare(torch, out, ref, atol: float, rtol: float, where: str, mode: str = "allclose") -> dict:
    """Raise Reject on the first failing output; return the worst errors of a passing one."""
    worst = {"max_abs_err": 0.0, "max_rel_err": 0.0}
    outs, refs = _as_tuple(out), _as_tuple(ref)
    if len(outs) != len(refs):
        raise Reject("shape_mismatch", f"{where}: returned {len(outs)} outputs, expected {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        tag = f"{where} output {i}"
        if type(o) is not torch.Tensor and not isinstance(o, torch.nn.Parameter):
            raise Reject("shape_mismatch" if not isinstance(o, torch.Tensor) else "cheat_suspected",
                         f"{tag}: returned {type(o).__name__}, expected a plain torch.Tensor")
        if tuple(o.shape) != tuple(r.shape):
            raise Reject("shape_mismatch", f"{tag}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise Reject("dtype_mismatch", f"{tag}: dtype {o.dtype}, expected {r.dtype}")
        # float64 on the tensors' own device: copying large outputs to the host would dominate.
        of, rf = o.detach().double(), r.detach().to(o.device).double()
        bad = ~torch.isfinite(of) & torch.isfinite(rf)
        if bool(bad.any()):
            raise Reject("nan", f"{tag}: {int(bad.sum())}/{bad.numel()} NaN/Inf values where the reference is "
                                "finite (unwritten outputs read as NaN: they are pre-filled with poison)")
        if mode == "relative_l2":
            rel_l2 = float((of - rf).norm() / rf.norm().clamp_min(1e-30))
            if rel_l2 > rtol:
                raise Reject("wrong_output", f"{tag}: relative L2 error {rel_l2:.3g} above {rtol}", max_rel_err=rel_l2)
            worst["max_rel_err"] = max(worst["max_rel_err"], rel_l2)
            continue
        diff = (of - rf).abs()
        fails = (diff > atol) & (diff > rtol * rf.abs())
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff / rf.abs().clamp_min(1e-12)).max()) if diff.numel() else 0.0
        if bool(fails.any()):
            raise Reject("wrong_output",
                         f"{tag}: {int(fails.sum())}/{fails.numel()} elements outside atol={atol} rtol={rtol}; "
                         f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}",
                         max_abs_err=max_abs, max_rel_err=max_rel)
        worst = {"max_abs_err": max(worst["max_abs_err"], max_abs), "max_rel_err": max(worst["max_rel_err"], max_rel)}
    return worst


def _copy(value):
    """Tensors are copied; scalar inputs (FlashInfer-Bench allows them) are immutable."""
    return value.clone() if hasattr(value, "clone") else value


def _check(torch, req, reference, run, seeds, sync, original, threads, errors: dict | None = None) -> int:
    checked = 0
    for workload in req["workloads"]:
        for seed in seeds:
            where = f"workload {workload['name']} seed {seed}"
            inputs = reference.make_inputs(workload["params"], seed, req["device"], req["dtype"])
            expected = reference.reference(*[_copy(t) for t in inputs])  # reference first, on copies
            originals = [_copy(t) for t in inputs]
            try:
                with _Poison(torch):
                    out = run(*inputs)
                sync()
            except Reject:
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure is the candidate's
                raise Reject(_classify(exc), f"{where}:\n" + traceback.format_exc(), restart=_cuda_fault(exc))
            _check_integrity(torch, original, threads, where)
            worst = _compare(torch, out, expected, req["atol"], req["rtol"], where, req.get("correctness", "allclose"))
            if errors is not None:
                for key, value in worst.items():
                    errors[key] = max(errors.get(key, 0.0), value)
            for i, (now, before) in enumerate(zip(inputs, originals)):
                if isinstance(now, torch.Tensor) and not torch.equal(now, before):
                    raise Reject("input_mutated", f"{where}: input {i} was modified by the kernel")
            checked += 1
    return checked


# ---------------------------------------------------------------- timing

def _summary(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "samples": len(samples)}


def _time_once(req, fn, warm: bool = False) -> list[float]:
    if req["device"] == "cuda":
        import triton.testing

        # do_bench clears L2 before every timed call and times each call with CUDA events.
        # Only the first round of a workload needs the full warm-up.
        warmup = min(5.0, req["warmup_ms"]) if warm else req["warmup_ms"]
        return [t * 1e3 for t in triton.testing.do_bench(fn, warmup=warmup, rep=req["rep_ms"], return_mode="all")]
    samples = []
    for _ in range(req["interpreter_reps"]):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def _time_kernels_cupti(torch, fn, reps: int) -> list[float] | None:
    """Kernel-only time per call from CUPTI (torch.profiler): the sum of the call's kernel
    durations, with launch overhead excluded. A device-to-device memcpy between calls clears L2
    and marks where one call ends."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    flush_a = torch.empty(64 * 2**20, dtype=torch.int32, device="cuda")
    flush_b = torch.empty_like(flush_a)
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush_a.copy_(flush_b)
            fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    calls: list[float] = []
    for event in events:
        if event.name.startswith("Memcpy"):
            calls.append(0.0)
        elif calls:
            calls[-1] += event.time_range.elapsed_us()
    calls = [c for c in calls if c > 0]
    return calls if len(calls) >= reps // 2 else None


def _time(torch, req, reference, fns: dict) -> dict:
    """Interleaved rounds: every round times each function once, in rotating order. A workload
    whose candidate runs under `cupti_below_us` (launch overhead would dominate) is timed by
    CUPTI kernel time in every round instead of CUDA events."""
    out: dict = {name: {} for name in fns}
    names = list(fns)
    for workload in req["workloads"]:
        inputs = reference.make_inputs(workload["params"], 0, req["device"], req["dtype"])
        calls = {name: (lambda f=fns[name]: f(*inputs)) for name in names}
        metric = "cuda_event" if req["device"] == "cuda" else "interpreter_wall"
        measure = lambda call: _time_once(req, call, warm=True)  # noqa: E731
        if metric == "cuda_event" and statistics.median(_time_once(req, calls["candidate"])) < req["cupti_below_us"]:
            if _time_kernels_cupti(torch, calls["candidate"], 3):
                metric = "cupti_kernel"
                measure = lambda call: _time_kernels_cupti(torch, call, req["cupti_reps"]) or [float("nan")]  # noqa: E731
        pooled = {name: [] for name in names}
        rounds = {name: [] for name in names}
        for r in range(req["rounds"]):
            for name in names[r % len(names):] + names[: r % len(names)]:
                samples = measure(calls[name])
                pooled[name] += samples
                rounds[name].append(statistics.median(samples))
        for name in names:
            out[name][workload["name"]] = {**_summary(pooled[name]), "round_medians_us": rounds[name],
                                           "metric": metric}
    return out


# ---------------------------------------------------------------- compile ahead

def _compile_only(torch, req, reference, run) -> dict:
    """Compile every kernel the entry point launches, for every workload, without launching any:
    Triton's JITFunction.run(warmup=True) compiles and returns. Inputs are made on the host and
    only allocated on the GPU (no kernels), so a candidate being timed on the same GPU meanwhile is
    not disturbed. The binaries land in the Triton cache this worker shares with the timing worker."""
    from triton.runtime.jit import JITFunction

    original = JITFunction.run

    def compile_instead(self, *args, **kwargs):
        kwargs["warmup"] = True
        return original(self, *args, **kwargs)

    JITFunction.run = compile_instead
    try:
        for workload in req["workloads"]:
            host = reference.make_inputs(workload["params"], 0, "cpu", req["dtype"])
            run(*[torch.empty_like(t, device=req["device"]) if isinstance(t, torch.Tensor) else t for t in host])
    finally:
        JITFunction.run = original
    return {"status": "compiled", "error": None}


# ---------------------------------------------------------------- one request

def _settle_comparators(req, reference, fns: dict, sync, threads: int) -> int:
    """Call every comparator once per workload before timing: torch.compile compiles on its first
    call and leaves helper threads behind. The candidate has passed every check by now, so the
    thread count is re-read after this, and the post-timing checks hold it to the new count."""
    for workload in req["workloads"]:
        inputs = reference.make_inputs(workload["params"], 0, req["device"], req["dtype"])
        for name, fn in fns.items():
            if name != "candidate":
                try:
                    fn(*inputs)
                except BaseException as exc:  # noqa: BLE001 - say whose failure it is
                    raise Reject(_classify(exc), f"comparator {name!r} failed while warming up (not the kernel "
                                 f"under test):\n" + traceback.format_exc(), restart=_cuda_fault(exc)) from None
    sync()
    return max(threads, threading.active_count())


def evaluate(req: dict) -> dict:
    import torch

    original = _watched(torch)
    threads = threading.active_count()
    sync = torch.cuda.synchronize if req["device"] == "cuda" else (lambda: None)
    ref_path = req["reference_path"]
    if ref_path not in _REFERENCES:
        _REFERENCES[ref_path] = _load_module(ref_path, f"accelopt_reference_{len(_REFERENCES)}")
    reference = _REFERENCES[ref_path]

    def load(path: str):
        _counter[0] += 1
        try:
            module = _load_module(path, f"accelopt_candidate_{_counter[0]}")
            return getattr(module, req["entry_point"])
        except BaseException as exc:  # noqa: BLE001
            raise Reject(_classify(exc), "importing the kernel failed:\n" + traceback.format_exc()) from None

    run = load(req["source_path"])
    _check_integrity(torch, original, threads, "import")
    if req.get("compile_only"):
        try:
            return _compile_only(torch, req, reference, run)
        except BaseException as exc:  # noqa: BLE001 - the real evaluation reports failures
            raise Reject(_classify(exc), traceback.format_exc(), restart=_cuda_fault(exc)) from None
    seeds = [req["seed_offset"] + s for s in range(req["seeds"])]
    errors: dict = {}
    checked = _check(torch, req, reference, run, seeds, sync, original, threads, errors)
    if req.get("check_only"):
        return {"status": "verified", "error": None, "checks": checked}

    fns = {"candidate": run}
    for name, path in (req.get("compare") or {}).items():
        fns[name] = load(path)  # comparators were verified when they were evaluated
    if len(fns) > 1:
        threads = _settle_comparators(req, reference, fns, sync, threads)
    try:
        timings = _time(torch, req, reference, fns)
        sync()
    except BaseException as exc:  # noqa: BLE001
        raise Reject(_classify(exc), "while timing:\n" + traceback.format_exc(), restart=_cuda_fault(exc)) from None
    _check_integrity(torch, original, threads, "timing")
    try:  # the same module, after all the timed calls, on inputs it has never seen
        _check(torch, req, reference, run, [req["seed_offset"] + 500], sync, original, threads)
    except Reject as r:
        raise Reject("cheat_suspected", f"correct before timing but not after it ({r.status}): {r.error}",
                     restart=r.extra.get("restart", False)) from None
    device_name = torch.cuda.get_device_name() if req["device"] == "cuda" else "cpu (Triton interpreter)"
    return {"status": "verified", "error": None, "checks": checked, "timings": timings["candidate"], **errors,
            "compare": {k: v for k, v in timings.items() if k != "candidate"}, "device_name": device_name}


def serve() -> None:
    # Keep a private handle on the real stdout for verdicts; everything else printed by
    # candidates (Python or C level) lands on stderr.
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            result = evaluate(req)
        except Reject as r:
            result = {"status": r.status, "error": _tail(r.error), **r.extra}
        except BaseException:  # noqa: BLE001 - report, never hang the parent
            result = {"status": "runtime_error", "error": _tail("harness worker failed:\n" + traceback.format_exc()),
                      "restart": True}
        results.write(RESULT_MARK + req["nonce"] + json.dumps(result) + "\n")
        results.flush()
        if result.get("restart"):
            return  # the pool starts a fresh process: this one's CUDA context or globals are suspect


if __name__ == "__main__":
    serve()
