"""GPU benchmark: verdicts on a shared GPU. Four `accelopt check` processes, each a kernel against
the kernel it was made from, first one after another (alone), then all at once on the same GPU.
With the device lease (tools/harness/device_lease.py) the processes time one at a time, so the
verdicts at once should fall within the intervals they have alone; whoever waits says so.

    CUDA_VISIBLE_DEVICES=0 python evals/bench_shared_gpu.py --out shared.json

The pairs are AccelOpt's FlashInfer-Bench bests against the corpus solutions they started from
(evals/realworld/accelopt_bests/manifest.json), and AccelOpt's gqa decode (kv8) against o3's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from accelopt.evals.bench_fib_tuner import json_of  # `check --json`'s one JSON document

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"
PAIRS = {  # task: (kernel, against)
    "rmsnorm_h128": ("accelopt_bests/rmsnorm_h128.py", "solutions/o3_rmsnorm_h128_35b90e.py"),
    "gemm_n28672_k4096": ("accelopt_bests/gemm_n28672_k4096.py", "solutions/o3_gemm_n28672_k4096_4c9c32.py"),
    "fused_add_rmsnorm_h7168": ("accelopt_bests/fused_add_rmsnorm_h7168.py",
                                "solutions/gemini-2.5-pro_fused_add_rmsnorm_h7168_05pwmx.py"),
    "gqa_paged_decode_h32_kv8_d128_ps1": ("solutions/accelopt-gpt-oss-120b_gqa_paged_decode_h32_kv8_d128_ps1_0cb2d36f.py",
                                          "solutions/o3_gqa_paged_decode_h32_kv8_d128_ps1_c3c0cc.py"),
}


def check(task: str, timeout_s: float) -> dict[str, Any]:
    kernel, against = PAIRS[task]
    cmd = [sys.executable, "-m", "accelopt", "check", str(REALWORLD / "tasks" / task), str(REALWORLD / kernel),
           "--against", str(REALWORLD / against), "--device", "cuda", "--json"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    verdict = json_of(done.stdout) or {}
    versus: dict[str, Any] = (verdict.get("versus") or {}).get("against") or {}
    return {"task": task, "rc": done.returncode, "wall_s": round(time.monotonic() - start, 1),
            "status": verdict.get("status"), "speedup": versus.get("speedup"), "kernel_only": kernel_only(verdict),
            "interval": [versus.get("ci_low"), versus.get("ci_high")], "faster": versus.get("faster"),
            "flags": verdict.get("flags"), "waited": [line for line in done.stderr.splitlines() if "waiting for" in line],
            "stderr_tail": done.stderr[-600:] if done.returncode not in (0, 1) else ""}


def kernel_only(verdict: dict) -> float | None:
    """The geomean over workloads of the comparator's kernel-only time over the kernel's (CUPTI,
    the same rounds): what the span's verdict would be without the host work between launches."""
    mine, theirs = verdict.get("workloads") or {}, ((verdict.get("compare") or {}).get("against") or {})
    ratios = [theirs[w]["kernel_us"] / t["kernel_us"] for w, t in mine.items()
              if t.get("kernel_us") and (theirs.get(w) or {}).get("kernel_us")]
    if not ratios:
        return None
    product = 1.0
    for r in ratios:
        product *= r
    return round(product ** (1 / len(ratios)), 4)


def within(alone: dict, together: dict) -> bool | None:
    """The verdict at once inside the interval alone, or the two intervals overlapping."""
    lo, hi = alone["interval"]
    s, (tlo, thi) = together["speedup"], together["interval"]
    if None in (lo, hi, s, tlo, thi):
        return None
    return lo <= s <= hi or (tlo <= hi and lo <= thi)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default=",".join(PAIRS))
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    alone = [check(t, args.timeout) for t in tasks]
    start = time.monotonic()
    with ThreadPoolExecutor(len(tasks)) as pool:
        together = list(pool.map(lambda t: check(t, args.timeout), tasks))
    at_once_s = round(time.monotonic() - start, 1)
    rows = [{"task": a["task"], "alone": a, "together": t, "within": within(a, t)} for a, t in zip(alone, together)]
    args.out.write_text(json.dumps({"rows": rows, "at_once_wall_s": at_once_s,
                                    "alone_wall_s": round(sum(a["wall_s"] for a in alone), 1)}, indent=1))
    for r in rows:
        a, t = r["alone"], r["together"]
        print(f"{r['task']:36} alone {a['speedup']} {a['interval']} kernels {a['kernel_only']} ({a['wall_s']} s) | "
              f"at once {t['speedup']} {t['interval']} kernels {t['kernel_only']} ({t['wall_s']} s, waited: "
              f"{len(t['waited'])}) within: {r['within']}")
    print(f"alone one after another {sum(a['wall_s'] for a in alone):.0f} s; all at once {at_once_s:.0f} s")


if __name__ == "__main__":
    main()
