"""KernelBench import, measured: every problem of every level of a KernelBench checkout imported
with its automatic small interpreter workload, then each reference run from scratch (the
PyTorch reference as the baseline kernel) through the judge on the Triton CPU interpreter.

    python evals/bench_kernelbench_import.py --repo path/to/KernelBench              # levels 1-3
    python evals/bench_kernelbench_import.py --repo ... --levels 1 --limit 20 --json out.json
    python evals/bench_kernelbench_import.py --repo ... --levels 1 --problems 74,82    # re-check some

Prints a table per level: imported, verified from scratch, and each failure with a one-line reason.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _first_line(text: str | None, limit: int = 160) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def verify_from_scratch(task_dir: Path, timeout_s: float) -> tuple[str, str, float]:
    """(status, one-line error, seconds) of the task's reference judged as its own baseline kernel."""
    from accelopt.tools.harness.reference_kernel import reference_source
    from accelopt.tools.harness.runner import evaluate
    from accelopt.tools.task import load_task

    task = load_task(task_dir)
    started = time.monotonic()
    result = evaluate(task, reference_source(task), device="cpu", trusted=True, rounds=1, timeout_s=timeout_s)
    return result.status, _first_line(result.error), time.monotonic() - started


def bench_level(repo: Path, level: int, out: Path, *, limit: int | None, verify: bool, timeout_s: float,
                problem_ids: set[int] | None = None) -> dict:
    from accelopt.evals.interop.kernelbench_repo import import_level

    started = time.monotonic()

    def progress(problem: Path, failure: str | None) -> None:
        print(f"  level {level} {problem.name}: {'import failed: ' + _first_line(failure) if failure else 'imported'}",
              flush=True)

    imported = import_level(repo, level, out / f"level{level}", limit=limit, problem_ids=problem_ids,
                            progress=progress)
    row: dict = {"level": level, "problems": len(imported.imported) + len(imported.failures),
                 "imported": len(imported.imported), "verified": 0, "import_s": time.monotonic() - started,
                 "failures": {name: f"import: {_first_line(reason)}" for name, reason in imported.failures.items()},
                 "verify_s": {}}
    for task_dir in imported.imported if verify else []:
        status, error, seconds = verify_from_scratch(task_dir, timeout_s)
        row["verify_s"][task_dir.name] = round(seconds, 1)
        print(f"  level {level} {task_dir.name}: {status} in {seconds:.1f}s {error}", flush=True)
        if status == "verified":
            row["verified"] += 1
        else:
            row["failures"][task_dir.name] = f"from scratch: {status}: {error}"
    return row


def print_table(rows: list[dict], verify: bool) -> None:
    print("\n| level | problems | imported | verified from scratch | import s | verify s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        verified = str(r["verified"]) if verify else "(not run)"
        print(f"| {r['level']} | {r['problems']} | {r['imported']} | {verified} | {r['import_s']:.0f} | "
              f"{sum(r['verify_s'].values()):.0f} |")
    for r in rows:
        for name, reason in r["failures"].items():
            print(f"- level {r['level']} {name}: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True, help="A KernelBench checkout (or its KernelBench/ folder)")
    parser.add_argument("--levels", default="1,2,3", help="Comma-separated levels (default 1,2,3)")
    parser.add_argument("--limit", type=int, default=None, help="The first N problems of each level")
    parser.add_argument("--problems", default=None,
                        help="Comma-separated problem ids: only these of each level (a re-check of some)")
    parser.add_argument("--out", type=Path, default=None, help="Where the suites go (default: a temporary folder)")
    parser.add_argument("--no-verify", action="store_true", help="Import only")
    parser.add_argument("--timeout", type=float, default=600.0, help="Seconds per from-scratch check")
    parser.add_argument("--json", type=Path, default=None, help="Also write the rows as JSON")
    args = parser.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="kernelbench-import-"))
    ids = {int(p) for p in args.problems.split(",")} if args.problems else None
    rows = [bench_level(args.repo, int(level), out, limit=args.limit, verify=not args.no_verify,
                        timeout_s=args.timeout, problem_ids=ids) for level in args.levels.split(",")]
    print_table(rows, not args.no_verify)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
