"""How well the compile-ahead pass (tools/harness/compile_ahead.py) predicts real kernels' launches,
on a machine with no GPU: every solution of the real-world corpus (evals/realworld/manifest.json:
LLM-written FlashInfer-Bench Triton solutions, and AccelOpt's own bests beside them) compiled for a
GPU target in the confined no-GPU process, each GPU workload of its task called once.

    python evals/bench_compile_ahead.py                    # the corpus, for sm_90 (an H100)
    python evals/bench_compile_ahead.py --only gemm --capability 9.0 --json out.json
    python evals/bench_compile_ahead.py --baselines        # the bundled tasks' baselines too

Per kernel: seconds of the process, Triton kernels with a cubin in the cache it left, cubins,
autotuning configurations compiled, and whether it predicted the launch (the entry point ran to
its end on every workload) or why not; then the totals ("N of M predicted") and how many kernels
used each CUDA stand-in (torch.cuda's API answered as the GPU would, device="cuda" mapped to the
CPU). The pass itself never touches a GPU.

On a GPU host, `--gpu-check` then asks the judge whether the prediction held: the kernel checked
(check_only: every workload and seed, as an evaluation checks it) in a sandbox seeded with the
ahead cache, whose own cache is kept and compared: a cubin there that the ahead pass did not
write was compiled on the GPU's time (a miss, named). `--gpu-cold` times the same check unseeded
too (its load + checks phases: what the ahead pass saves the GPU's lease). The capability is then
the judge's GPU's (nvidia-smi), not --capability.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
REALWORLD = ROOT / "evals" / "realworld"
TASKS = ROOT / "evals" / "tasks"


def corpus(baselines: bool) -> list[tuple[str, Path, Path]]:
    """(name, task folder, kernel file): the manifest's pairs, AccelOpt's bests, optionally the
    bundled tasks' baselines."""
    manifest = json.loads((REALWORLD / "manifest.json").read_text())
    out = [(p["name"], REALWORLD / p["task"], REALWORLD / (p["adapter"] or p["solution"])) for p in manifest["pairs"]]
    bests = REALWORLD / "accelopt_bests" / "manifest.json"
    if bests.is_file():
        for definition, best in json.loads(bests.read_text())["bests"].items():
            out.append((f"accelopt-best_{definition}", REALWORLD / "tasks" / definition,
                        REALWORLD / "accelopt_bests" / best["file"]))
    if baselines:
        out += [(f"baseline_{t.name}", t, t / "baseline.py") for t in sorted(TASKS.iterdir())
                if (t / "baseline.py").is_file()]
    return out


def sandbox_check(pool, task, kernel: Path, cache: Path | None, kept: Path, timeout_s: float = 600.0) -> dict:
    """The judge checks `kernel` (check_only) in a sandbox seeded with `cache` (None: cold), its
    sandbox's Triton cache moved to `kept`: the verdict, the load + checks seconds, and the cubins
    the sandbox compiled itself (kernel names; none: every launch found compiled)."""
    from accelopt.tools.harness.runner import build_request

    request = build_request(task, "cuda", str(kernel), {}, rounds=1)
    request.update(check_only=True, keep_cache=str(kept), **({"triton_cache": str(cache)} if cache else {}))
    result = pool.run(request, timeout_s)
    before = {p.parent.name for p in cache.glob("*/*.cubin")} if cache else set()
    compiled = sorted(p.stem for p in kept.glob("*/*.cubin") if p.parent.name not in before)
    phases = result.get("phases_s") or {}
    return {"status": result["status"], "error": (result.get("error") or "")[:300] or None,
            "load_checks_s": round(sum(v for k, v in phases.items() if k in ("load", "checks")), 3),
            "compiled_in_sandbox": compiled}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="kernels whose name contains this (repeatable)")
    parser.add_argument("--capability", default="9.0", help="the GPU target's compute capability (9.0: H100)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel")
    parser.add_argument("--baselines", action="store_true", help="the bundled tasks' baselines too")
    parser.add_argument("--json", help="write every record here")
    parser.add_argument("--gpu-check", action="store_true", help="then check each on the GPU, seeded (see above)")
    parser.add_argument("--gpu-cold", action="store_true", help="and unseeded, to time what the pass saves")
    args = parser.parse_args()

    from accelopt.tools.harness.compile_ahead import GpuTarget, compile_ahead, gpu_target
    from accelopt.tools.task import load_task

    major, minor = (int(x) for x in args.capability.split("."))
    target: GpuTarget | None = GpuTarget((major, minor))
    pool = None
    if args.gpu_check or args.gpu_cold:
        from accelopt.tools.harness.pool import make_pool

        pool = make_pool("cuda", 1)
        target = gpu_target(pool.workers[0].gpu)
        if target is None:
            print("--gpu-check: nvidia-smi reads no GPU here", file=sys.stderr)
            return 2
        major, minor = target.capability
    chosen = [c for c in corpus(args.baselines) if not args.only or any(o in c[0] for o in args.only)]
    rows, records = [], {}
    began = time.monotonic()
    print(f"compile-ahead for sm_{major}{minor} on this machine (no GPU), {len(chosen)} kernels", flush=True)
    for name, task_dir, kernel in chosen:
        task = load_task(task_dir)
        with tempfile.TemporaryDirectory(prefix="accelopt-bench-ahead-") as tmp:
            record = compile_ahead(task, kernel, None, Path(tmp) / "cache", target, timeout_s=args.timeout)
            records[name] = {**record.__dict__, "predicted": record.predicted}
            why = "predicted" if record.predicted else f"NOT: {record.note}"
            rows.append((name, record))
            print(f"{name:68s} {record.seconds:6.1f} s  kernels {len(record.kernels)}  cubins {record.binaries:3d}  "
                  f"configs {record.configs:3d}{f' ({record.failed_configs} failed)' if record.failed_configs else ''}  workloads {record.workloads_run}/{record.workloads}  {why}", flush=True)
            if pool is not None:
                seeded = sandbox_check(pool, task, kernel, Path(tmp) / "cache", Path(tmp) / "kept")
                records[name]["gpu"] = {"seeded": seeded}
                line = (f"    GPU, seeded: {seeded['status']}, load+checks {seeded['load_checks_s']:.1f} s, "
                        f"compiled in the sandbox: {seeded['compiled_in_sandbox'] or 'nothing'}")
                if args.gpu_cold:
                    cold = sandbox_check(pool, task, kernel, None, Path(tmp) / "kept-cold")
                    records[name]["gpu"]["cold"] = cold
                    line += f"; cold: load+checks {cold['load_checks_s']:.1f} s, {len(cold['compiled_in_sandbox'])} cubins"
                print(line + (f" ({seeded['error']})" if seeded["error"] else ""), flush=True)
        if args.json:  # after each kernel: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(records, indent=1, default=list) + "\n")
    predicted = [n for n, r in rows if r.predicted]
    print()
    print(f"{len(predicted)} of {len(rows)} predicted (ran to the end on every GPU workload); "
          f"{sum(r.binaries for _, r in rows)} cubins, {sum(r.configs for _, r in rows)} autotuning configurations, "
          f"{sum(r.seconds for _, r in rows):.0f} s of compile processes ({time.monotonic() - began:.0f} s wall)")
    for name, record in rows:
        if not record.predicted:
            print(f"  not predicted: {name}: {record.note}")
    if pool is not None:
        checked = [n for n in records if "gpu" in records[n]]
        hit = [n for n in checked if not records[n]["gpu"]["seeded"]["compiled_in_sandbox"]]
        print(f"GPU ({target.name if target else '?'}): the sandbox compiled nothing for {len(hit)} of {len(checked)} kernels")
        if args.gpu_cold:
            saved = [records[n]["gpu"]["cold"]["load_checks_s"] - records[n]["gpu"]["seeded"]["load_checks_s"]
                     for n in checked]
            print(f"  load+checks seconds saved per evaluation: total {sum(saved):.1f} s, "
                  f"max {max(saved, default=0):.1f} s")
        pool.close()
    used: dict[str, int] = {}
    for _, record in rows:
        for what in record.stand_ins:
            used[what] = used.get(what, 0) + 1
    print("CUDA stand-ins the kernels' own code used (kernels using each):")
    for what, n in sorted(used.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:3d}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
