"""GPU benchmark: one run at the size AccelOpt's published search has, through the public CLI,
against the replay endpoint (evals/replay: a rehearsal with real LLM-written kernels and a
modelled LLM's latency, not an LLM), and what the run leaves behind at that size.

    python evals/bench_full_run.py --out full --tasks rmsnorm_h128 -T 16            # B2 N4 K2 F2
    python evals/bench_full_run.py --out full --tasks rmsnorm_h128 -T 16 --kill-at 8  # kill -9, resume
    python evals/bench_full_run.py --out full --tasks rmsnorm_h128 -T 2 --langsmith  # a stand-in trace sink
    python evals/bench_full_run.py --out reh --tasks evals/tasks/softmax --device cpu -T 4 --schedule pipeline
        # a rehearsal of the schedule on the interpreter: the replay serves the task's own baseline
        # and its variants; the models' chain is real time, the evaluations an emulator's

For each task of the FlashInfer-Bench corpus (`evals/realworld/tasks/<task>`, with the corpus
solution AccelOpt started from as its baseline.py):
1. the replay server for the task (seeded, `--profile`'s latency model in real time);
2. `accelopt optimize TASK -B -N -K -F -T --model vllm:replay --base-url URL --device cuda`, with an
   insight store of its own (`--memory`), its wall time and exit code;
3. with `--kill-at I`: the run's process group killed with SIGKILL as iteration I's record lands,
   then `accelopt resume RUN`; what was evaluated or asked twice is counted;
4. where the seconds went (evals/reporting/timeline.py), per iteration and for the run;
5. `accelopt show RUN` and `accelopt report RUN`, timed; the run directory's and checkpoint
   file's sizes; the insights stored and whether each rests on an audited kernel;
6. the replay server's own counts (requests per role, modelled seconds, queue waits).

Rows go to OUT/full_run.json as each task ends; logs beside it. Nothing here claims a speed-up:
the kernels are the corpus's, the speedups the harness's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REALWORLD = HERE / "realworld"
# the corpus solution each task starts from: AccelOpt's own starting points where it published a
# best (accelopt_bests/manifest.json), else the o3 solution of the definition
BASELINES = {
    "rmsnorm_h128": "solutions/o3_rmsnorm_h128_35b90e.py",
    "gemm_n28672_k4096": "solutions/o3_gemm_n28672_k4096_4c9c32.py",
    "fused_add_rmsnorm_h7168": "solutions/gemini-2.5-pro_fused_add_rmsnorm_h7168_05pwmx.py",
    "gqa_paged_decode_h32_kv8_d128_ps1": "solutions/o3_gqa_paged_decode_h32_kv8_d128_ps1_c3c0cc.py",
}


def accelopt(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelopt", *args]


def task_name(task: str) -> str:
    """A corpus task's name, or a task folder's (`evals/tasks/softmax`: softmax)."""
    return Path(task).name if task not in BASELINES else task


def task_folder(task: str, out: Path) -> Path:
    """The corpus task with its baseline.py, or a task folder that has its own baseline.py (the
    replay then serves that baseline and its variants: a bundled task's rehearsal on the
    interpreter, where the corpus's bf16 kernels cannot run), in OUT/tasks/<name> (made afresh)."""
    folder = out / "tasks" / task_name(task)
    if folder.exists():
        shutil.rmtree(folder)
    if task in BASELINES:
        shutil.copytree(REALWORLD / "tasks" / task, folder)
        shutil.copy(REALWORLD / BASELINES[task], folder / "baseline.py")
    elif (Path(task) / "baseline.py").is_file():
        shutil.copytree(task, folder)
    else:
        raise SystemExit(f"{task}: neither a corpus task ({', '.join(BASELINES)}) nor a task folder with a baseline.py")
    return folder


DEADLINE = [float("inf")]  # --budget: no command runs past it (monotonic seconds)


def run_timed(cmd: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None,
              kill_when=None) -> dict[str, Any]:
    """The command in a session of its own, output to `log`; `kill_when()` true: SIGKILL to the
    whole group (the run and its judges), as a crash would. Past `timeout_s` or the bench's
    deadline it is killed the same way (`timed_out`): a later `--resume` goes on from there."""
    start = time.monotonic()
    timeout_s = max(1.0, min(timeout_s, DEADLINE[0] - start))
    killed = False
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        while proc.poll() is None:
            if time.monotonic() - start > timeout_s or (kill_when is not None and kill_when()):
                killed = time.monotonic() - start <= timeout_s
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.5)
    return {"cmd": " ".join(cmd), "rc": proc.returncode, "wall_s": round(time.monotonic() - start, 1),
            "killed": killed, "timed_out": not killed and proc.returncode == -signal.SIGKILL, "pid": proc.pid}


def recorded(run_dir: Path, iteration: int) -> bool:
    """The run's record node finished `iteration` (its span is written as it ends)."""
    path = run_dir / "timeline.jsonl"
    if not path.is_file():
        return False
    return any(f'"node": "record", "iteration": {iteration},' in line for line in path.read_text().splitlines())


def leftovers(run_dir: Path, pids: list[int], grace_s: float = 5.0) -> list[str]:
    """Processes still running that belong to the run: those naming its folder, and judges and
    sandboxes whose home names one of the run's processes (`pids`) or an owner that is gone.
    Another run's judges on the same machine are not this run's. Processes already exiting
    (a sandbox dies with its parent a moment later) get `grace_s` to go."""
    deadline = time.monotonic() + grace_s
    while True:
        lines = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
        found = [line.strip() for line in lines if str(run_dir) in line or _orphaned_or_ours(line, pids)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _orphaned_or_ours(line: str, pids: list[int]) -> bool:
    from accelopt.tools.harness.device_lease import pid_alive
    from accelopt.tools.harness.pool import home_owner

    owner = home_owner(line)
    return owner is not None and (owner in pids or not pid_alive(owner))


def size_mb(path: Path) -> float:
    if path.is_file():
        return round(path.stat().st_size / 2**20, 2)
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 2)


def repeats(run_dir: Path) -> dict[str, int]:
    """Evaluations logged twice under one key (a measured kernel measured again)."""
    keys: dict[str, int] = {}
    path = run_dir / "evaluations.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        key = json.loads(line)["key"]
        keys[key] = keys.get(key, 0) + 1
    return {"evaluations_logged": sum(keys.values()), "evaluated_twice": sum(1 for n in keys.values() if n > 1)}


def stored_insights(run_dir: Path, summary: dict) -> dict[str, Any]:
    """The lessons the run distilled, and whether each one's child was audited by ncu."""
    path = run_dir / "insights.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    audited = 0
    for row in rows:
        child = (row.get("provenance") or {}).get("child_id")
        result = run_dir / "candidates" / str(child) / "result.json"
        audit = json.loads(result.read_text()).get("audit") if result.is_file() else None
        audited += bool(audit and audit.get("agreed"))
    return {"insights": len(rows), "children_audited_by_ncu": audited}


def traced_env(endpoint: str) -> dict[str, str]:
    """The benchmarked run's environment: this one, tracing to a stand-in LangSmith endpoint."""
    return {**os.environ, "LANGSMITH_TRACING": "true", "LANGSMITH_ENDPOINT": endpoint,
            "LANGSMITH_API_KEY": "stand-in", "LANGSMITH_PROJECT": "bench-full-run"}


def candidate_rows(run_dir: Path, served: dict[str, dict]) -> list[dict[str, Any]]:
    """Every candidate as judged, with what the replay server served it as (a real kernel and
    which, a variant and its moves): why a real kernel did or did not lead is read here."""
    from accelopt.evals.replay.server import source_digest

    rows = []
    for folder in sorted((run_dir / "candidates").glob("*")) if (run_dir / "candidates").is_dir() else []:
        try:
            result = json.loads((folder / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        kernel = folder / "kernel.py"
        origin = served.get(source_digest(kernel.read_text())) if kernel.is_file() else None
        rows.append({"id": folder.name, "status": result.get("status"), "speedup": result.get("speedup"),
                     "flags": result.get("flags"), "error": (result.get("error") or "")[:300] or None,
                     "audit": (result.get("audit") or {}).get("note"),
                     "served": f"{origin.get('kind')}: {origin.get('origin')}" if origin else None})
    return rows


def bench_task(task: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from accelopt.evals.replay.server import MODEL_ID, ReplayServer
    from accelopt.evals.reporting.timeline import read_timeline, render

    name = task_name(task)
    run_dir = out / "runs" / name
    resuming = args.resume and (run_dir / "run.json").is_file()  # a run an earlier command left: go on
    folder = out / "tasks" / name if resuming else task_folder(task, out)
    if run_dir.exists() and not resuming:
        shutil.rmtree(run_dir)
    log = out / f"{name}.log"
    if not resuming:
        log.write_text("")
    row: dict[str, Any] = {"task": name, "baseline": BASELINES.get(task, f"{task}/baseline.py"), "shape": {
        "B": args.beams, "N": args.plans, "K": args.samples, "F": args.fixes, "T": args.iterations,
        "schedule": args.schedule, "quorum": args.quorum}}
    env: dict[str, str] | None = None  # the run inherits this environment, plus LangSmith's below
    sink = None
    if args.langsmith:
        sys.path.insert(0, str(HERE.parent))
        from tests.langsmith_endpoint import LangSmithEndpoint

        sink = LangSmithEndpoint().__enter__()
        env = traced_env(sink.url)
    with ReplayServer(folder, seed=args.seed, profile=args.profile, time_scale=args.time_scale,
                      port=args.port) as server:
        memory = ["--memory", str(out / "memory" / name), "--create-memory"] if not args.no_memory else ["--no-memory"]
        cmd = accelopt("optimize", str(folder), "--model", f"vllm:{MODEL_ID}", "--base-url", server.url,
                       "-B", str(args.beams), "-N", str(args.plans), "-K", str(args.samples), "-F", str(args.fixes),
                       "-T", str(args.iterations), "--schedule", args.schedule, "--device", args.device,
                       *(["--quorum", str(args.quorum)] if args.quorum else []),
                       "--run-dir", str(run_dir), *memory,
                       *(["--embedder", args.embedder] if args.embedder else []))
        kill_when = (lambda: recorded(run_dir, args.kill_at)) if args.kill_at else None
        if resuming:  # the same server address (--port): run.json names it
            row["resumed_after"] = {"left_running": leftovers(run_dir, []), **repeats(run_dir)}
            cmd = accelopt("resume", str(run_dir))
        row["optimize"] = run_timed(cmd, log, args.timeout, env, kill_when)
        if row["optimize"]["killed"]:
            time.sleep(2)
            row["after_kill"] = {"left_running": leftovers(run_dir, [row["optimize"]["pid"]]), **repeats(run_dir),
                                 "requests_before_resume": server.stats().get("requests")}
            row["resume"] = run_timed(accelopt("resume", str(run_dir)), log, args.timeout, env)
        row["replay"] = server.stats()
        row["candidates"] = candidate_rows(run_dir, server.served())
    row["left_running"] = leftovers(run_dir, [row[k]["pid"] for k in ("optimize", "resume") if k in row])
    row.update(repeats(run_dir))
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    row["summary"] = {k: summary.get(k) for k in ("best_id", "best_speedup", "stop_reason", "candidates_evaluated",
                                                  "statuses", "usage", "versus_torch_compile", "failure")}
    try:
        found = read_timeline(run_dir)
        row["timeline"] = found.model_dump()
        with log.open("a") as f:
            f.write(render(found) + "\n")
    except FileNotFoundError as exc:
        row["timeline"] = str(exc)
    DEADLINE[0] += 60  # what is left of the budget is for reading the run
    row["show"] = run_timed(accelopt("show", str(run_dir)), log, 60)
    row["report"] = run_timed(accelopt("report", str(run_dir)), log, 60)
    row["sizes_mb"] = {"run_dir": size_mb(run_dir), "checkpoints": size_mb(run_dir / "checkpoints.sqlite"),
                       "candidates": len(list((run_dir / "candidates").glob("*")))
                       if (run_dir / "candidates").is_dir() else 0}
    row["memory"] = stored_insights(run_dir, summary)
    if sink is not None:
        runs = sink.runs()
        row["langsmith"] = {"runs_delivered": len(runs), "ended": sum(1 for r in runs.values() if r.get("end_time")),
                            "with_error": sum(1 for r in runs.values() if r.get("error"))}
        sink.__exit__(None, None, None)
    return row


def main(argv: list[str] | None = None) -> None:
    from accelopt.nodes.schedule import Schedule

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default="rmsnorm_h128",
                        help="comma-separated: " + ", ".join(BASELINES) + ", or a task folder with a baseline.py")
    parser.add_argument("-B", "--beams", type=int, default=2)
    parser.add_argument("-N", "--plans", type=int, default=4)
    parser.add_argument("-K", "--samples", type=int, default=2)
    parser.add_argument("-F", "--fixes", type=int, default=2)
    parser.add_argument("-T", "--iterations", type=int, default=16)
    parser.add_argument("--schedule", default="beam", choices=[s.value for s in Schedule],
                        help="the search's (--schedule); beam here, as the recorded rows ran")
    parser.add_argument("--quorum", type=float, default=None,
                        help="the search's (--quorum): an iteration moves on at this share of its replies")
    parser.add_argument("--profile", default="gpt-oss-120b", help="the replay server's latency model")
    parser.add_argument("--time-scale", type=float, default=1.0, help="the replay server's: 1 real time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-at", type=int, default=0, help="SIGKILL the run as iteration I is recorded, resume")
    parser.add_argument("--resume", action="store_true",
                        help="resume a run an earlier command left in OUT (killed, or cut off by --timeout) "
                             "instead of starting afresh; with the same --port")
    parser.add_argument("--port", type=int, default=0, help="the replay server's port (0: any free one)")
    parser.add_argument("--langsmith", action="store_true", help="trace the run to a stand-in LangSmith endpoint")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--embedder", help="a model folder (evals/pack_embedder.py unpack) for the memory")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try this script (interpreter times)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per optimize or resume")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="seconds for the whole bench: a run still going then is killed (resume it with "
                             "--resume); show, report and the rest get the last 60 s")
    args = parser.parse_args(argv)
    if args.budget:
        DEADLINE[0] = time.monotonic() + args.budget - 60
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for task in [t for t in args.tasks.split(",") if t]:
        rows.append(bench_task(task, args, args.out))
        (args.out / "full_run.json").write_text(json.dumps(rows, indent=1))
        r = rows[-1]
        tl = r["timeline"]["total"] if isinstance(r["timeline"], dict) else {}
        print(f"{task}: rc {r['optimize']['rc']} wall {r['optimize']['wall_s']} s, "
              f"{tl.get('evaluations')} evaluations ({tl.get('evaluations_per_min')}/min), "
              f"best {r['summary'].get('best_speedup')}, show {r['show']['wall_s']} s, report {r['report']['wall_s']} s, "
              f"run dir {r['sizes_mb']['run_dir']} MB, checkpoints {r['sizes_mb']['checkpoints']} MB; the served model "
              f"decoded at {r['replay'].get('decode_share_of_peak')} of its peak (its replies alone take "
              f"{r['replay'].get('decode_floor_s')} s at the peak)", flush=True)


if __name__ == "__main__":
    main()
