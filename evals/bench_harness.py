"""GPU benchmarks of the evaluation harness itself (results go to BENCHMARKS.md).

    python evals/bench_harness.py throughput   # persistent workers vs a fresh process per candidate
    python evals/bench_harness.py fidelity     # 10 repeats of one kernel; harness median vs ncu
    python evals/bench_harness.py robustness   # 20 candidates, 5 of them hang, crash or fault the GPU
    python evals/bench_harness.py all --out harness.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tools.harness.pool import make_pool
from tools.harness.kernel_profile import profile_kernel
from tools.harness.runner import evaluate, gpu_count
from tools.task import load_task

TASKS = Path(__file__).with_name("tasks")
SOFTMAX = load_task(TASKS / "softmax")
RMSNORM = load_task(TASKS / "rmsnorm")
BASE = SOFTMAX.baseline_source


def good_variants() -> list[str]:
    """15 distinct correct softmax kernels: exp / exp2 / exp2 with 2 stages, times 5 warp counts."""
    exp2 = BASE.replace("num = tl.exp(x)", "num = tl.exp2(x * 1.4426950408889634)")
    bodies = [BASE, exp2, exp2.replace("num_warps=4)", "num_warps=4, num_stages=2)")]
    return [b.replace("num_warps=4", f"num_warps={w}") for b in bodies for w in (1, 2, 4, 8, 16)]


def bad_variants() -> dict[str, str]:
    return {
        "host_hang": BASE.replace("return out", "import time; time.sleep(3600)\n    return out"),
        # A loop over ~4e12 iterations, its sum kept alive: the kernel runs for hours.
        "gpu_hang": BASE.replace("x = x - tl.max(x, axis=0)",
                                 "spin = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n"
                                 "    for _ in range(0, n_cols.to(tl.int64) * 1000000000):\n"
                                 "        spin += tl.load(in_ptr + offs, mask=mask, other=0.0, volatile=True)\n"
                                 "    x = x + spin * 0.0\n    x = x - tl.max(x, axis=0)"),
        "segfault": BASE.replace("return out", "import os; os.kill(os.getpid(), 11)\n    return out"),
        "illegal_address": BASE.replace("tl.store(out_ptr + row", "tl.store(out_ptr + (1 << 40) + row"),
        "abort": BASE.replace("return out", "import os; os.abort()"),
    }


def throughput(n: int = 10) -> dict:
    """Evaluations per GPU-minute. Sequential: one candidate at a time. Concurrent: two submitters,
    as the graph's parallel branches do, with and without compiling the waiting candidate ahead."""
    from concurrent.futures import ThreadPoolExecutor

    out = {}
    modes = (("fresh_process", dict(fresh_process=True), 1), ("persistent", dict(compile_ahead=False), 1),
             ("persistent_2_submitters", dict(compile_ahead=False), 2),
             ("persistent_2_submitters_compile_ahead", dict(compile_ahead=True), 2))
    for mode, options, threads in modes:
        pool = make_pool("cuda", gpu_count(), **options)
        start = time.monotonic()
        with ThreadPoolExecutor(threads) as ex:
            statuses = list(ex.map(lambda src: evaluate(SOFTMAX, src, device="cuda", compare={"baseline": BASE},
                                                        pool=pool).status, good_variants()[:n]))
        elapsed = time.monotonic() - start
        pool.close()
        out[mode] = {"candidates": n, "seconds": elapsed, "per_gpu_minute": 60 * n / elapsed / max(1, gpu_count()),
                     "verified": statuses.count("verified")}
    out["ratio_persistent_vs_fresh"] = out["persistent"]["per_gpu_minute"] / out["fresh_process"]["per_gpu_minute"]
    out["ratio_compile_ahead"] = (out["persistent_2_submitters_compile_ahead"]["per_gpu_minute"]
                                  / out["persistent_2_submitters"]["per_gpu_minute"])
    return out


def fidelity(repeats: int = 10) -> dict:
    """The same kernel measured `repeats` times with each metric (CUDA events through do_bench,
    CUPTI kernel-only time), and ncu's gpu__time_duration for the largest workload."""
    pool = make_pool("cuda", gpu_count())
    out: dict = {"repeats": repeats}
    big = max(RMSNORM.spec.workloads, key=lambda w: w.params["M"] * w.params["H"])
    for metric, threshold in (("cuda_event", 0.0), ("cupti_kernel", 1e9)):
        medians: dict[str, list[float]] = {}
        statuses = []
        start = time.monotonic()
        for _ in range(repeats):
            result = evaluate(RMSNORM, RMSNORM.baseline_source, device="cuda", pool=pool, cupti_below_us=threshold)
            statuses.append(result.status if result.ok else f"{result.status}: {(result.error or '')[-300:]}")
            for name, t in result.workloads.items():
                medians.setdefault(name, []).append(t.median_us)
        out[metric] = {"seconds_per_eval": (time.monotonic() - start) / repeats, "statuses": statuses, "workloads": {
            n: {"median_us": statistics.median(v), "spread_pct": 100 * (max(v) - min(v)) / statistics.median(v)}
            for n, v in medians.items()}}
    pool.close()
    ncu = profile_kernel(RMSNORM, RMSNORM.baseline_source, workload=big.name)
    if ncu and ncu["tool"] == "ncu":
        ncu_us = sum(k["time_us"] for k in ncu["kernels"])
        out["ncu"] = {"workload": big.name, "ncu_us": ncu_us, "profile": ncu["summary"], **{
            f"{m}_diff_pct": 100 * (out[m]["workloads"][big.name]["median_us"] - ncu_us) / ncu_us
            for m in ("cuda_event", "cupti_kernel") if big.name in out[m]["workloads"]}}
    return out


def robustness() -> dict:
    pool = make_pool("cuda", gpu_count())
    cases = [(f"good_{i}", src) for i, src in enumerate(good_variants())] + list(bad_variants().items())
    order = [cases[i] for i in (0, 15, 1, 2, 16, 3, 4, 17, 5, 6, 18, 7, 8, 19, 9, 10, 11, 12, 13, 14)]
    start = time.monotonic()
    results = {}
    for name, src in order:
        r = evaluate(SOFTMAX, src, device="cuda", timeout_s=30, pool=pool)
        results[name] = {"status": r.status, "error": (r.error or "")[-200:],
                         "median_us": {k: v.median_us for k, v in r.workloads.items()}}
    pool.close()
    measured = sum(1 for n, r in results.items() if n.startswith("good") and r["status"] == "verified")
    return {"seconds": time.monotonic() - start, "good_measured": measured, "results": results,
            "worker_starts": sum(w.started for w in pool.workers)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("which", choices=["throughput", "fidelity", "robustness", "all"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {}
    for name, fn in (("robustness", robustness), ("fidelity", fidelity), ("throughput", throughput)):
        if args.which in (name, "all"):
            report[name] = fn()
            print(name, json.dumps({k: v for k, v in report[name].items() if k != "results"}, indent=1, default=str))
            if name == "robustness":
                for case, r in report[name]["results"].items():
                    print(f"  {case:16s} {r['status']:16s} {r['error'][-110:]!r}")
            if args.out:
                args.out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
