"""GPU benchmark of the harness on real-world kernels: LLM-written FlashInfer-Bench Triton
solutions (evals/realworld/manifest.json), every one honest and correct, so every one should
come out `verified` with timings an independent clock agrees with.

    python evals/bench_realworld.py                      # everything: one JSON + a table
    python evals/bench_realworld.py --only o3_rmsnorm_h128_35b90e --only gemm --out rw.json

Per pair:
1. the harness: evaluate(task, solution, device="cuda", compare={"reference": the task's PyTorch
   reference as a kernel}) -> verdict, per workload median_us (the primary metric) and the
   secondary kernel_us / event_us / outside_us, the reference's median_us, speedup;
2. independent clocks on the largest workload, each in a plain subprocess that imports nothing
   of the harness: triton.testing.do_bench (median of CUDA-event times, L2 flushed between
   calls), and, when ncu is on PATH, `ncu --clock-control none --metrics gpu__time_duration.sum`
   summed over the kernels of one call (warm-up and autotuning happen outside the profiled range);
3. agreement: |harness - independent| / independent within 5%, judged only for kernels above
   50 us (below that, launch overhead and clock granularity dominate). do_bench is compared with
   the harness's median_us (both are wall spans of a call); ncu with kernel_us when the harness
   reports it (both are kernel-only), else with median_us.

Workloads: each task keeps at most 2 (--workloads), the upstream definition's own small one and
the heavy one AccelOpt selected; seeds default to 2. One H100 runs everything in about 6-8
minutes (most of it the slow PyTorch references of the attention ops and the GEMM autotuning).
A pair that fails (harness error, timeout, crash of a probe) is recorded and the run goes on.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
REALWORLD = ROOT / "evals" / "realworld"
AGREE_PCT = 5.0
AGREE_ABOVE_US = 50.0
PROBE_RANGE = "accelopt_bench"

# The independent probe: no harness code, only the task's reference (for inputs) and the solution.
_PROBE = r'''
import importlib.util, json, sys, torch, triton
req = json.loads(sys.argv[1])

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod)
    return mod

ref = load(req["reference"], "bench_reference")
run = getattr(load(req["solution"], "bench_solution"), req["entry_point"])
inputs = ref.make_inputs(req["params"], 0, "cuda", req["dtype"])
for _ in range(3):  # compile and autotune outside anything measured
    run(*inputs)
torch.cuda.synchronize()
if req["mode"] == "do_bench":
    ms = triton.testing.do_bench(lambda: run(*inputs), warmup=25, rep=req["rep_ms"], return_mode="median")
    print("@@PROBE@@" + json.dumps({"us": ms * 1e3}))
else:
    torch.cuda.nvtx.range_push(req["range"])
    run(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
'''


def load_manifest() -> list[dict]:
    return json.loads((REALWORLD / "manifest.json").read_text())["pairs"]


def pick(pairs: list[dict], only: list[str] | None) -> list[dict]:
    """--only NAME: an exact pair name, else every pair whose name contains it."""
    if not only:
        return pairs
    chosen = []
    for pattern in only:
        exact = [p for p in pairs if p["name"] == pattern]
        chosen += exact or [p for p in pairs if pattern in p["name"]]
    seen: set[str] = set()
    return [p for p in chosen if not (p["name"] in seen or seen.add(p["name"]))]


def solution_source(pair: dict) -> str:
    return (REALWORLD / (pair.get("adapter") or pair["solution"])).read_text()


def axis_size(task, params: dict) -> float:
    """How big a workload is: the product of its definition axes (scalars left out)."""
    definition = json.loads((Path(task.root) / "definition.json").read_text())
    return math.prod(max(1, int(v)) for k, v in params.items() if k in definition["axes"])


def run_probe(task, pair: dict, params: dict, mode: str, timeout_s: float, rep_ms: float) -> dict:
    """One independent measurement in a fresh process: {'us': ...} or {'error': ...}."""
    req = {"reference": str(Path(task.root) / "reference.py"), "solution": str(REALWORLD / pair["solution"]),
           "entry_point": task.spec.entry_point, "params": params, "dtype": task.spec.dtype, "mode": mode,
           "range": PROBE_RANGE, "rep_ms": rep_ms}
    if pair.get("adapter"):
        req["solution"] = str(REALWORLD / pair["adapter"])
    with tempfile.TemporaryDirectory(prefix="accelopt-bench-") as tmp:
        script = Path(tmp) / "probe.py"
        script.write_text(_PROBE)
        cmd = [sys.executable, str(script), json.dumps(req)]
        if mode == "ncu":
            cmd = [shutil.which("ncu"), "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
                   "--nvtx", "--nvtx-include", f"{PROBE_RANGE}/", "--csv", "--page", "raw", *cmd]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_CACHE_DIR": str(Path(tmp) / "triton-cache")}
        env.pop("TRITON_INTERPRET", None)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"{mode} probe timed out after {timeout_s:.0f}s"}
    if mode == "do_bench":
        for line in proc.stdout.splitlines():
            if line.startswith("@@PROBE@@"):
                return json.loads(line[len("@@PROBE@@"):])
        return {"error": f"do_bench probe failed (rc {proc.returncode}): {_last_line(proc.stderr or proc.stdout)}"}
    kernels = parse_ncu(proc.stdout)
    if not kernels:
        return {"error": f"ncu saw no kernel (rc {proc.returncode}): {_last_line(proc.stderr or proc.stdout)}"}
    return {"us": sum(us for _, us in kernels), "kernels": len(kernels),
            "names": sorted({name for name, _ in kernels})[:8]}


def parse_ncu(text: str) -> list[tuple[str, float]]:
    """(kernel name, microseconds) per row of `ncu --csv --page raw`: a header, a units row, data."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units = rows[0], rows[1]
    if "gpu__time_duration.sum" not in header:
        return []
    col = header.index("gpu__time_duration.sum")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(units[col], 1e-3)
    name_col = header.index("Kernel Name") if "Kernel Name" in header else None
    out = []
    for row in rows[2:]:
        try:
            out.append((row[name_col] if name_col is not None else "?", float(row[col].replace(",", "")) * scale))
        except (ValueError, IndexError):
            continue
    return out


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip() and not line.strip().startswith("^")]
    return lines[-1][:300] if lines else ""


def agreement(harness_us: float | None, independent_us: float | None) -> dict:
    if harness_us is None or independent_us is None or independent_us <= 0:
        return {"diff_pct": None, "agree": None, "judged": False}
    diff = 100.0 * (harness_us - independent_us) / independent_us
    judged = independent_us >= AGREE_ABOVE_US
    return {"diff_pct": diff, "agree": abs(diff) <= AGREE_PCT if judged else None, "judged": judged}


def bench_pair(pair: dict, args, pool) -> dict:
    from tools.harness.reference_kernel import reference_source
    from tools.harness.runner import evaluate
    from tools.task import load_task

    started = time.monotonic()
    task = load_task(REALWORLD / pair["task"])
    workloads = task.spec.workloads[: args.workloads]
    task = task.model_copy(update={"spec": task.spec.model_copy(update={"workloads": workloads})})
    out: dict = {"name": pair["name"], "model": pair["model"], "task": task.name,
                 "workloads_used": [w.name for w in workloads]}
    result = evaluate(task, solution_source(pair), device="cuda", timeout_s=args.timeout, seeds=args.seeds,
                      compare={"reference": reference_source(task)}, pool=pool)
    out["status"] = result.status
    out["error"] = _first_line(result.error)
    out["error_full"] = result.error
    out["device_name"] = result.device_name
    out["findings"] = [f.model_dump() for f in getattr(result, "findings", [])]
    out["evidence"] = list(getattr(result, "evidence", []) or [])
    out["kernels_seen"] = list(getattr(result, "kernels_seen", []) or [])
    out["flags"] = list(result.flags)
    out["max_abs_err"], out["max_rel_err"] = result.max_abs_err, result.max_rel_err
    reference = result.compare.get("reference", {})
    out["workloads"] = {}
    for name, t in result.workloads.items():
        ref_us = reference[name].median_us if name in reference else None
        out["workloads"][name] = {
            "median_us": t.median_us, "iqr_us": t.iqr_us, "metric": t.metric, "samples": t.samples,
            **{k: getattr(t, k, None) for k in ("kernel_us", "event_us", "outside_us", "disagreement", "pct_peak")},
            "reference_us": ref_us, "speedup_vs_reference": (ref_us / t.median_us) if ref_us and t.median_us else None}
    versus = result.versus.get("reference")
    out["speedup_vs_reference"] = versus.model_dump() if versus else None
    out["harness_s"] = time.monotonic() - started

    if result.ok and not args.no_independent:
        largest = max(workloads, key=lambda w: axis_size(task, w.params))
        harness = out["workloads"][largest.name]
        independent: dict = {"workload": largest.name}
        independent["do_bench"] = run_probe(task, pair, largest.params, "do_bench", args.timeout, args.rep_ms)
        independent["do_bench"].update(agreement(harness["median_us"], independent["do_bench"].get("us")))
        if shutil.which("ncu") and not args.no_ncu:
            independent["ncu"] = run_probe(task, pair, largest.params, "ncu", args.timeout, args.rep_ms)
            versus_ncu = harness["kernel_us"] if harness.get("kernel_us") is not None else harness["median_us"]
            independent["ncu"].update(agreement(versus_ncu, independent["ncu"].get("us")))
            independent["ncu"]["compared_with"] = "kernel_us" if harness.get("kernel_us") is not None else "median_us"
        else:
            independent["ncu"] = {"error": "ncu not on PATH" if not args.no_ncu else "skipped (--no-ncu)"}
        out["independent"] = independent
    out["seconds"] = time.monotonic() - started
    return out


def _first_line(text: str | None) -> str | None:
    if not text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else None


def _fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: list[dict]) -> str:
    head = (f"{'pair':58s} {'status':15s} {'workload':34s} {'median_us':>10s} {'kernel_us':>10s} {'event_us':>10s} "
            f"{'ref_us':>11s} {'speedup':>8s} | {'do_bench':>9s} {'diff%':>6s} {'ncu_us':>9s} {'diff%':>6s} agree")
    lines = [head, "-" * len(head)]
    for r in results:
        if not r.get("workloads"):
            lines.append(f"{r['name'][:58]:58s} {r['status']:15s} {(r.get('error') or '')[:120]}")
            continue
        ind = r.get("independent") or {}
        for name, t in r["workloads"].items():
            extra = ""
            if ind.get("workload") == name:
                db, nc = ind.get("do_bench", {}), ind.get("ncu", {})
                verdicts = [v for v in (db.get("agree"), nc.get("agree")) if v is not None]
                agree = "n/a<50us" if not verdicts and (db.get("us") or nc.get("us")) else (
                    "-" if not verdicts else ("yes" if all(verdicts) else "NO"))
                extra = (f"{_fmt(db.get('us')):>9s} {_fmt(db.get('diff_pct'), '+.1f'):>6s} "
                         f"{_fmt(nc.get('us')):>9s} {_fmt(nc.get('diff_pct'), '+.1f'):>6s} {agree}")
            lines.append(f"{r['name'][:58]:58s} {r['status']:15s} {name[:34]:34s} {_fmt(t['median_us']):>10s} "
                         f"{_fmt(t.get('kernel_us')):>10s} {_fmt(t.get('event_us')):>10s} {_fmt(t.get('reference_us')):>11s} "
                         f"{_fmt(t.get('speedup_vs_reference'), '.2f'):>8s} | {extra}")
    return "\n".join(lines)


def summary(results: list[dict], seconds: float) -> dict:
    verified = [r for r in results if r["status"] == "verified"]
    judged = [(r["name"], tool, r["independent"][tool]) for r in verified for tool in ("do_bench", "ncu")
              if r.get("independent", {}).get(tool, {}).get("judged")]
    return {"pairs": len(results), "verified": len(verified),
            "not_verified": {r["name"]: f"{r['status']}: {r.get('error')}" for r in results if r["status"] != "verified"},
            "agreement_judged": len(judged), "agreement_ok": sum(1 for *_, v in judged if v["agree"]),
            "disagreements": [f"{n} {tool} {v['diff_pct']:+.1f}%" for n, tool, v in judged if not v["agree"]],
            "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="a pair name, or a substring of names (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("bench_realworld.json"), help="the JSON report")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per harness evaluation and per probe")
    parser.add_argument("--workloads", type=int, default=2, help="workloads per task (the first N of the task)")
    parser.add_argument("--seeds", type=int, default=2, help="correctness seeds per workload")
    parser.add_argument("--rep-ms", type=float, default=100.0, help="do_bench measuring time per probe")
    parser.add_argument("--no-ncu", action="store_true", help="skip the ncu probe")
    parser.add_argument("--no-independent", action="store_true", help="harness only: no do_bench/ncu probes")
    args = parser.parse_args(argv)

    import torch
    import triton

    from tools.harness.pool import get_pool
    from tools.harness.runner import gpu_count

    if not torch.cuda.is_available():
        print("no CUDA GPU visible: this benchmark needs one", file=sys.stderr)
        return 2
    pairs = pick(load_manifest(), args.only)
    if not pairs:
        print(f"no pair matches {args.only}", file=sys.stderr)
        return 2
    pool = get_pool("cuda", gpu_count())
    ncu = shutil.which("ncu")
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "ncu": ncu, "workloads_per_task": args.workloads,
           "seeds": args.seeds, "agree_pct": AGREE_PCT, "agree_above_us": AGREE_ABOVE_US}
    if ncu:
        env["ncu_version"] = _last_line(subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout)
    print(json.dumps(env), flush=True)
    started = time.monotonic()
    results = []
    for i, pair in enumerate(pairs, 1):
        try:
            r = bench_pair(pair, args, pool)
        except Exception as e:  # noqa: BLE001 - one broken pair must not stop the run
            r = {"name": pair["name"], "model": pair["model"], "status": "bench_error",
                 "error": f"{type(e).__name__}: {e}"[:300], "traceback": traceback.format_exc()}
        results.append(r)
        ind = r.get("independent") or {}
        print(f"[{i}/{len(pairs)} {time.monotonic() - started:5.0f}s] {r['name']}: {r['status']}"
              + (f" ({r['error']})" if r.get("error") else "")
              + (f" do_bench {_fmt(ind.get('do_bench', {}).get('us'))}us ncu {_fmt(ind.get('ncu', {}).get('us'))}us"
                 if ind else "") + f" [{r.get('seconds', 0):.0f}s]", flush=True)
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=2, default=str))
    report = {"environment": env, "summary": summary(results, time.monotonic() - started), "results": results}
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(table(results))
    print()
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
