"""GPU benchmarks of the evaluation harness itself (results go to BENCHMARKS.md).

    python evals/bench_harness.py throughput   # judges with warm sandboxes vs a fresh process per candidate
    python evals/bench_harness.py scaling      # evaluations per minute on 1 GPU and on all GPUs of the host
    python evals/bench_harness.py fidelity     # 10 repeats of one kernel; span, kernel-only, events vs ncu
    python evals/bench_harness.py robustness   # 20 candidates, 5 of them hang, crash or fault the GPU
    python evals/bench_harness.py identical    # the softmax baseline against an identical copy, 20 times
    python evals/bench_harness.py all --out harness.json
    python evals/bench_harness.py throughput --checkout /path/to/old
                                               # then the same at another checkout, on the same machine:
                                               # both figures and their ratio in one report
    python evals/bench_harness.py scaling --cluster ray [--ray-address auto]
                                               # evaluations per minute: the local pool on 1 GPU, and Ray's
                                               # evaluation actors on 1, 2, 4 and all GPUs of the cluster
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelopt.evals.check_process import checkout_env
from accelopt.tools import settings
from accelopt.tools.harness.kernel_profile import profile_kernel
from accelopt.tools.harness.pool import make_pool
from accelopt.tools.harness.runner import evaluate, gpu_count
from accelopt.tools.task import Task, load_task

TASKS = Path(__file__).with_name("tasks")
SOFTMAX = load_task(TASKS / "softmax")
RMSNORM = load_task(TASKS / "rmsnorm")


def _baseline(task: Task) -> str:
    assert task.baseline_source is not None, f"the bundled {task.name} task has a baseline.py"
    return task.baseline_source


BASE = _baseline(SOFTMAX)
RMSNORM_BASE = _baseline(RMSNORM)


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


def _evaluate(pool, src: str):
    """One softmax candidate against the baseline, on the local pool or on a Ray pool's actors."""
    if hasattr(pool, "slots"):  # tools/harness/ray_pool.RayPool
        return pool.evaluate(SOFTMAX, src, compare={"baseline": BASE}, profile=False, audit_winners=False)
    return evaluate(SOFTMAX, src, device="cuda", compare={"baseline": BASE}, pool=pool, audit_winners=False)


def _rate(pool, sources: list[str], submitters: int) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    start = time.monotonic()
    with ThreadPoolExecutor(submitters) as ex:
        results = list(ex.map(lambda src: _evaluate(pool, src), sources))
    elapsed = time.monotonic() - start
    steps = {k for r in results for k in r.phases_s}
    return {"candidates": len(sources), "submitters": submitters, "seconds": elapsed,
            "per_minute": 60 * len(sources) / elapsed,
            "verified": sum(r.status == "verified" for r in results),
            "median_phase_s": {k: statistics.median(r.phases_s.get(k, 0.0) for r in results) for k in sorted(steps)},
            "statuses": sorted({f"{r.status}: {(r.error or '')[-200:]}" for r in results if not r.ok})}


THROUGHPUT_MODES = ("fresh_process", "warm_sandboxes", "warm_sandboxes_2_submitters")


def throughput(n: int = 10, modes: tuple[str, ...] = THROUGHPUT_MODES) -> dict:
    """Evaluations per minute on one GPU: a fresh judge and cold sandboxes for every candidate
    (what "a fresh process per candidate" costs), against one judge whose next sandboxes start
    and warm while the current candidate is judged; with one and with two submitters (the
    graph's parallel branches). Every candidate runs in a fresh sandbox either way."""
    out = {}
    for mode, fresh, submitters in (("fresh_process", True, 1), ("warm_sandboxes", False, 1),
                                    ("warm_sandboxes_2_submitters", False, 2)):
        if mode not in modes:
            continue
        pool = make_pool("cuda", 1, gpus=["0"], fresh_process=fresh)
        _rate(pool, [BASE], 1)  # the judge's own start is not a candidate's cost
        out[mode] = _rate(pool, good_variants()[:n], submitters)
        pool.close()
        print(mode, json.dumps(out[mode]), flush=True)
    if "warm_sandboxes" in out and "fresh_process" in out:
        out["ratio_warm_vs_fresh"] = out["warm_sandboxes"]["per_minute"] / out["fresh_process"]["per_minute"]
    return out


def identical(n: int = 20, device: str = "cuda") -> dict:
    """The softmax baseline against an identical copy of itself, n times on one judge: every
    comparison must come out within noise (neither faster nor slower)."""
    pool = make_pool(device, 1, gpus=["0"]) if device == "cuda" else make_pool(device, 0)
    start = time.monotonic()
    verdicts = []
    try:
        for _ in range(n):
            r = evaluate(SOFTMAX, BASE, device=device, compare={"baseline": BASE}, pool=pool, audit_winners=False)
            v = r.versus.get("baseline")
            verdicts.append({"status": r.status, "speedup": v and v.speedup, "low": v and v.ci_low,
                             "high": v and v.ci_high, "faster": v and v.faster, "slower": v and v.slower,
                             "rounds": r.rounds.model_dump() if r.rounds else None,
                             "eval_s": r.eval_s})
    finally:
        pool.close()
    within = sum(1 for v in verdicts if v["status"] == "verified" and not v["faster"] and not v["slower"])
    return {"n": n, "within_noise": within, "seconds": time.monotonic() - start, "results": verdicts}


def scaling(per_gpu: int = 8) -> dict:
    """Evaluations per minute with one judge per GPU, 2 submitters per GPU, on 1 GPU and on all."""
    gpus = gpu_count()
    out: dict = {"gpus": gpus}
    for k in sorted({1, min(2, gpus), gpus}):
        pool = make_pool("cuda", k, gpus=[str(i) for i in range(k)])
        _rate(pool, [BASE] * k, k)  # start every judge first
        sources = (good_variants() * 4)[: per_gpu * k]
        out[f"{k}_gpu"] = _rate(pool, sources, 2 * k)
        pool.close()
    for k in sorted({min(2, gpus), gpus} - {1}):
        out[f"speedup_{k}_gpu"] = out[f"{k}_gpu"]["per_minute"] / out["1_gpu"]["per_minute"]
    return out


def ray_scaling(address: str, per_gpu: int = 8) -> dict:
    """Evaluations per minute through Ray's evaluation actors (one per GPU, 2 submitters per GPU)
    on 1, 2, 4 and all GPUs of the cluster, and the local pool on this host's first GPU."""
    import ray

    from accelopt.tools.harness.ray_pool import RayPool, connect

    connect(address)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    out: dict = {"cluster": address, "gpus": gpus, "nodes": len([n for n in ray.nodes() if n.get("Alive")])}
    if gpu_count():
        local = make_pool("cuda", 1, gpus=["0"])
        _rate(local, [BASE], 1)
        out["local_1_gpu"] = _rate(local, good_variants()[:per_gpu], 2)
        local.close()
    for k in sorted({1, 2, 4, gpus} & set(range(1, gpus + 1))):
        pool = RayPool(address, "cuda", max_actors=k)
        _rate(pool, [BASE] * len(pool.slots), len(pool.slots))  # every actor's judge started first
        out[f"ray_{k}_gpu"] = {**_rate(pool, (good_variants() * 4)[: per_gpu * k], 2 * k),
                               "nodes_used": sorted({s.node for s in pool.slots if s.done})}
        pool.close()
        print(f"ray_{k}_gpu", json.dumps(out[f"ray_{k}_gpu"]), flush=True)
    for k in sorted({2, 4, gpus} & set(range(2, gpus + 1))):
        out[f"speedup_{k}_gpu"] = out[f"ray_{k}_gpu"]["per_minute"] / out["ray_1_gpu"]["per_minute"]
    if "local_1_gpu" in out and "ray_1_gpu" in out:
        out["ray_vs_local_1_gpu"] = out["ray_1_gpu"]["per_minute"] / out["local_1_gpu"]["per_minute"]
    return out


def fidelity(repeats: int = 10) -> dict:
    """The same kernel evaluated `repeats` times: the span (primary), kernel-only time, CUDA
    events and the judge's outside clock, with their spread; ncu's gpu__time_duration for the
    largest workload."""
    pool = make_pool("cuda", 1, gpus=["0"])
    out: dict = {"repeats": repeats}
    big = max(RMSNORM.spec.workloads, key=lambda w: w.params["M"] * w.params["H"])
    figures: dict[str, dict[str, list[float]]] = {}
    statuses = []
    start = time.monotonic()
    for _ in range(repeats):
        result = evaluate(RMSNORM, RMSNORM_BASE, device="cuda", pool=pool, audit_winners=False)
        statuses.append(result.status if result.ok else f"{result.status}: {(result.error or '')[-300:]}")
        for name, t in result.workloads.items():
            for key, value in (("span_us", t.median_us), ("kernel_us", t.kernel_us), ("event_us", t.event_us),
                               ("outside_us", t.outside_us)):
                if value is not None:
                    figures.setdefault(name, {}).setdefault(key, []).append(value)
    pool.close()
    out["seconds_per_eval"] = (time.monotonic() - start) / repeats
    out["statuses"] = statuses
    out["workloads"] = {n: {k: {"median": statistics.median(v), "spread_pct": 100 * (max(v) - min(v)) /
                                statistics.median(v)} for k, v in f.items()} for n, f in figures.items()}
    ncu = profile_kernel(RMSNORM, RMSNORM_BASE, workload=big.name)
    if ncu and ncu["tool"] == "ncu" and big.name in out["workloads"]:
        ncu_us = sum(k["time_us"] for k in ncu["kernels"])
        out["ncu"] = {"workload": big.name, "ncu_us": ncu_us, **{
            f"{k}_diff_pct": 100 * (v["median"] - ncu_us) / ncu_us for k, v in out["workloads"][big.name].items()}}
    return out


def robustness() -> dict:
    pool = make_pool("cuda", gpu_count())
    cases = [(f"good_{i}", src) for i, src in enumerate(good_variants())] + list(bad_variants().items())
    order = [cases[i] for i in (0, 15, 1, 2, 16, 3, 4, 17, 5, 6, 18, 7, 8, 19, 9, 10, 11, 12, 13, 14)]
    start = time.monotonic()
    results = {}
    for name, src in order:
        r = evaluate(SOFTMAX, src, device="cuda", timeout_s=30, pool=pool, audit_winners=False)
        results[name] = {"status": r.status, "error": (r.error or "")[-200:],
                         "median_us": {k: v.median_us for k, v in r.workloads.items()}}
    pool.close()
    measured = sum(1 for n, r in results.items() if n.startswith("good") and r["status"] == "verified")
    return {"seconds": time.monotonic() - start, "good_measured": measured, "results": results,
            "judge_starts": sum(w.started for w in pool.workers)}


def at_checkout(checkout: Path, which: str, args: list[str], timeout_s: float = 1800) -> dict:
    """`which` run by another checkout's own bench (its folder first on PYTHONPATH, so its
    `accelopt` is the one imported), after this one's on the same machine: its report."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        subprocess.run([sys.executable, str(checkout / "evals" / "bench_harness.py"), which, *args, "--out", str(out)],
                       cwd=checkout, env=checkout_env(checkout), check=True, timeout=timeout_s)
        return json.loads(out.read_text()).get(which, {})


def side_by_side(now: dict, then: dict) -> dict:
    """Each throughput mode measured by both checkouts: this one's evaluations a minute over the other's."""
    return {mode: now[mode]["per_minute"] / then[mode]["per_minute"]
            for mode in now if mode in then and isinstance(now[mode], dict) and "per_minute" in now[mode]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("which", choices=["throughput", "scaling", "fidelity", "robustness", "identical", "all"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--modes", default=",".join(THROUGHPUT_MODES),
                        help="throughput: which of " + ", ".join(THROUGHPUT_MODES))
    parser.add_argument("--cluster", choices=["local", "ray"], default="local",
                        help="scaling: the local pool's judges, or Ray's evaluation actors (pip install accelopt[ray])")
    parser.add_argument("--ray-address", default=None, help="with --cluster ray (default: $ACCELOPT_RAY_ADDRESS or auto)")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="throughput: then the same modes at this other checkout (e.g. `git archive` of an old "
                             "commit), on the same machine; the report holds both and their ratio")
    args = parser.parse_args()
    address = args.ray_address or settings.ray_address() or "auto"
    report = {}
    modes = tuple(m for m in args.modes.split(",") if m)
    for name, fn in (("robustness", robustness), ("fidelity", fidelity), ("throughput", lambda: throughput(modes=modes)),
                     ("identical", identical),
                     ("scaling", (lambda: ray_scaling(address)) if args.cluster == "ray" else scaling)):
        if args.which in (name, "all"):
            report[name] = fn()
            print(name, json.dumps({k: v for k, v in report[name].items() if k != "results"}, indent=1, default=str))
            if name == "robustness":
                for case, r in report[name]["results"].items():
                    print(f"  {case:16s} {r['status']:16s} {r['error'][-110:]!r}")
            if name == "throughput" and args.checkout:
                report["throughput_at_checkout"] = then = at_checkout(args.checkout.resolve(), "throughput",
                                                                      ["--modes", args.modes])
                report["throughput_ratio"] = side_by_side(report[name], then)
                print("at", args.checkout, json.dumps(then, indent=1, default=str))
                print("this checkout over it:", json.dumps(report["throughput_ratio"]))
            if args.out:
                args.out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
