"""GPU benchmark: the judge against kernels written to beat it, beside honest ones, one cold
`accelopt check --json` process per check, as a user runs it.

    python evals/bench_adversarial.py --out now.json                          # this checkout
    python evals/bench_adversarial.py --out then.json --checkout /path/to/old  # another checkout's judge
    python evals/bench_adversarial.py --out x.json --only phase_sniff_stale,honest_softmax --repeats 3

Cases: every `# device: gpu` cheat of tests/fixtures/cheats (its header names the status it must get)
and the CPU cheats named in CPU_CHEATS, on the bundled softmax task (their header's status is the
interpreter's; on a GPU they must gain nothing: rejected, or verified with no `faster` verdict, as
`gained` says); honest kernels (the softmax
baseline against itself, AccelOpt's rmsnorm_h128 best against o3's), which must stay verified at their
speed. Per check: status, the first line of its error, each comparator's verdict word and speedup,
flags, the seed, the judge's steps and the process's wall seconds. Rows go to OUT as each check ends;
`--checkout` runs another checkout's CLI (its folder first on PYTHONPATH), for figures side by side.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from accelopt.evals.check_process import checkout_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHEATS = ROOT / "tests" / "fixtures" / "cheats"
# CPU cheats that act on a GPU too (their inputs or phases are the same there)
CPU_CHEATS = ("precomputed_seeds", "thread_at_import", "double_fork_compute", "float_cumsum", "mode_sniff")
REALWORLD = HERE / "realworld"


def cases() -> dict[str, dict]:
    softmax = HERE / "tasks" / "softmax"
    out = {"honest_softmax": {"task": softmax, "kernel": softmax / "baseline.py", "expect": "verified"},
           "honest_rmsnorm_h128": {"task": REALWORLD / "tasks" / "rmsnorm_h128",
                                   "kernel": REALWORLD / "accelopt_bests" / "rmsnorm_h128.py",
                                   "against": REALWORLD / "solutions" / "o3_rmsnorm_h128_35b90e.py",
                                   "expect": "verified"}}
    for path in sorted(CHEATS.glob("*.py")):
        text = path.read_text()
        if "# device: gpu" in text or path.stem in CPU_CHEATS:
            expect = re.search(r"^# expect: (\S+)", text, re.M)
            out[path.stem] = {"task": softmax, "kernel": path, "expect": expect.group(1) if expect else None}
    return out


def check(case: dict, checkout: Path, timeout_s: float) -> dict:
    """One cold `accelopt check --json` of the case, run by `checkout`'s CLI."""
    cmd = [sys.executable, "-m", "accelopt", "check", str(case["task"]), str(case["kernel"]), "--json",
           "--device", "cuda", "--timeout", str(timeout_s)]
    if case.get("against"):
        cmd += ["--against", str(case["against"])]
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=checkout, env=checkout_env(checkout),
                          timeout=timeout_s * 3 + 120)
    row: dict = {"wall_s": round(time.monotonic() - began, 1), "exit": done.returncode}
    try:
        record = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {**row, "status": None, "error": done.stderr[-1500:]}
    verdicts = record.get("verdicts") or {}
    row.update(status=record["status"], error=(record.get("error") or "").strip().splitlines()[0][:300]
               if record.get("error") else None, seed=record.get("seed"), flags=record.get("flags"),
               void=record.get("void"), phases_s=record.get("phases_s"), eval_s=record.get("eval_s"),
               verdicts={k: {"word": v["word"], "basis": v["basis"], "speedup": round(v["speedup"], 4),
                             "ci": [round(v["ci_low"], 4), round(v["ci_high"], 4)]} for k, v in verdicts.items()})
    row["gained"] = any(v["word"] == "faster" for v in row["verdicts"].values())
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose CLI judges (default: this one)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--budget", type=float, default=None, help="start no check past this many seconds")
    args = parser.parse_args()
    chosen = {k: v for k, v in cases().items() if not args.only or k in args.only.split(",")}
    began, rows = time.monotonic(), []
    for name, case in chosen.items():
        for i in range(args.repeats):
            if args.budget is not None and time.monotonic() - began > args.budget:
                break
            row = {"case": name, "run": i, "expect": case["expect"], **check(case, args.checkout.resolve(), args.timeout)}
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("case", "status", "expect", "gained", "wall_s", "error")}), flush=True)
            args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
