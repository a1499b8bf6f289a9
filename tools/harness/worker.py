"""Evaluates one candidate in its own process: correctness on every workload and seed, then timing.

Run as a script (`python worker.py`) with a JSON request on stdin; prints one result line
starting with RESULT_MARK. It imports nothing from accelopt, so it runs in a scrubbed
environment from a temporary working directory. A hang or a crash here costs the parent
one candidate: the parent kills this process on timeout and reads the exit signal.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
import traceback

RESULT_MARK = "@@ACCELOPT_RESULT@@"
ERROR_CHARS = 1500


def _tail(text: str, limit: int = ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _classify_exception(exc: BaseException) -> str:
    module = type(exc).__module__ or ""
    if isinstance(exc, SyntaxError) or module.startswith("triton.compiler") or type(exc).__name__ in (
            "CompilationError", "OutOfResources"):
        return "compile_error"
    return "runtime_error"


def _failure(status: str, error: str, **extra) -> dict:
    return {"status": status, "error": _tail(error), **extra}


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _compare(torch, out, ref, atol: float, rtol: float, where: str) -> dict | None:
    outs, refs = _as_tuple(out), _as_tuple(ref)
    if len(outs) != len(refs):
        return _failure("shape_mismatch", f"{where}: returned {len(outs)} outputs, expected {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        tag = f"{where} output {i}"
        if not isinstance(o, torch.Tensor):
            return _failure("shape_mismatch", f"{tag}: returned {type(o).__name__}, expected a tensor")
        if tuple(o.shape) != tuple(r.shape):
            return _failure("shape_mismatch", f"{tag}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            return _failure("dtype_mismatch", f"{tag}: dtype {o.dtype}, expected {r.dtype}")
        of, rf = o.detach().double().cpu(), r.detach().double().cpu()
        bad_values = ~torch.isfinite(of) & torch.isfinite(rf)
        if bool(bad_values.any()):
            return _failure("nan", f"{tag}: {int(bad_values.sum())} NaN/Inf values where the reference is finite")
        diff = (of - rf).abs()
        fails = (diff > atol) & (diff > rtol * rf.abs())
        if bool(fails.any()):
            max_abs = float(diff.max())
            max_rel = float((diff / rf.abs().clamp_min(1e-12)).max())
            return _failure(
                "wrong_output",
                f"{tag}: {int(fails.sum())}/{fails.numel()} elements outside atol={atol} rtol={rtol}; "
                f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}",
                max_abs_err=max_abs, max_rel_err=max_rel)
    return None


def _time_cuda(torch, fn, warmup_ms: float, rep_ms: float) -> list[float]:
    import triton.testing

    # do_bench clears L2 before every timed call and times each call with CUDA events.
    samples = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    return [t * 1e3 for t in samples]


def _time_interpreter(fn, reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def _summary(samples_us: list[float]) -> dict:
    q = statistics.quantiles(samples_us, n=4) if len(samples_us) >= 2 else [samples_us[0]] * 3
    return {"median_us": statistics.median(samples_us), "iqr_us": q[2] - q[0], "samples": len(samples_us)}


def evaluate(req: dict) -> dict:
    import torch

    device = req["device"]
    dtype = req["dtype"]
    atol, rtol = req["atol"], req["rtol"]
    reference = _load_module(req["reference_path"], "accelopt_reference")
    try:
        candidate = _load_module(req["source_path"], "accelopt_candidate")
        run = getattr(candidate, req["entry_point"])
    except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's fault
        return _failure(_classify_exception(exc), "importing the kernel failed:\n" + traceback.format_exc())

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    checked = 0
    for workload in req["workloads"]:
        for seed in range(req["seeds"]):
            where = f"workload {workload['name']} seed {seed}"
            inputs = reference.make_inputs(workload["params"], seed, device, dtype)
            # The reference runs first, on its own copies, so the candidate cannot influence it.
            expected = reference.reference(*[t.clone() for t in inputs])
            originals = [t.clone() for t in inputs]
            try:
                out = run(*inputs)
                sync()
            except BaseException as exc:  # noqa: BLE001
                return _failure(_classify_exception(exc), f"{where}:\n" + traceback.format_exc())
            bad = _compare(torch, out, expected, atol, rtol, where)
            if bad:
                return bad
            for i, (now, before) in enumerate(zip(inputs, originals)):
                if not torch.equal(now, before):
                    return _failure("input_mutated", f"{where}: input {i} was modified by the kernel")
            checked += 1

    timings = {}
    for workload in req["workloads"]:
        inputs = reference.make_inputs(workload["params"], 0, device, dtype)
        fn = lambda: run(*inputs)  # noqa: E731
        if device == "cuda":
            samples = _time_cuda(torch, fn, req["warmup_ms"], req["rep_ms"])
        else:
            samples = _time_interpreter(fn, req["interpreter_reps"])
        timings[workload["name"]] = _summary(samples)

    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    return {"status": "verified", "error": None, "checks": checked, "timings": timings,
            "device_name": device_name}


def main() -> None:
    req = json.loads(sys.stdin.read())
    try:
        result = evaluate(req)
    except BaseException:  # noqa: BLE001 - report, never hang the parent
        result = _failure("runtime_error", "harness worker failed:\n" + traceback.format_exc())
    # The nonce, known only to the parent and this process, keeps a kernel that prints
    # its own fake result line from being believed.
    sys.stdout.write("\n" + RESULT_MARK + req["nonce"] + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
