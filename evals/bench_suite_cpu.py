"""Where a command's CPU goes, by process role: the CPU suite's time is CPU-bound (its 2 cores about
90% busy), so its cost is the CPU its processes burn, most of it in processes pytest never reaps.

    python evals/bench_suite_cpu.py --out cpu.json -- .venv/bin/python -m pytest -q -n 2 --dist loadfile

Runs the command and, every 0.3 s, reads from /proc each process under it: its command line, its
parent and its CPU time (user + system) so far. A process that lives less than a sample is missed
(a few percent of the total). Prints the CPU per role (a judge, a sandbox template, a sandbox, a
pytest worker, an `accelopt` CLI process, anything else) and how many judges each process started;
writes every process to OUT.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import time
from pathlib import Path

from accelopt.tools.harness.judge_sandboxes import _children, _cpu_s  # the judge's own /proc readers


def tree(root: int) -> dict[int, int]:
    """Every process under `root` -> its parent, walked as the judge walks a sandbox's tree."""
    parents: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        for kid in _children(pid):
            if kid not in parents:
                parents[kid] = pid
                todo.append(kid)
    return parents


def role(cmd: str, parent_cmd: str) -> str:
    """What a process is, from its command line and its parent's (a sandbox is forked from its
    template, so both read `zygote.py`)."""
    if "judge.py" in cmd:
        return "judge"
    if "zygote.py" in cmd:
        return "sandbox" if "zygote.py" in parent_cmd else "sandbox template"
    if "exec(eval(sys.stdin.readline()))" in cmd:
        return "pytest worker"
    if " -m accelopt " in f" {cmd} " or "/bin/accelopt " in cmd:
        return "accelopt CLI"
    return "other"


def summary(processes: dict[str, dict]) -> dict:
    """CPU seconds and process counts per role, and how many processes started 1, 2, ... judges."""
    cpu: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    judges: collections.Counter = collections.Counter()
    for p in processes.values():
        parent = processes.get(str(p["parent"]), {}).get("cmd", "")
        kind = role(p["cmd"], parent)
        cpu[kind] += p["cpu_s"]
        count[kind] += 1
        if kind == "judge":
            judges[p["parent"]] += 1
    return {"cpu_s": round(sum(cpu.values()), 1),
            "roles": {k: {"cpu_s": round(v, 1), "processes": count[k]} for k, v in cpu.most_common()},
            "judges_per_process": dict(sorted(collections.Counter(judges.values()).items()))}


def sample(command: list[str], every_s: float = 0.3) -> tuple[int, float, dict[str, dict]]:
    started = time.monotonic()
    child = subprocess.Popen(command)
    seen: dict[str, dict] = {}
    while child.poll() is None:
        for pid, parent in tree(child.pid).items():
            entry = seen.get(str(pid))
            if entry is None:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                entry = seen[str(pid)] = {"cmd": cmd[:300], "parent": parent, "cpu_s": 0.0}
            entry["cpu_s"] = max(entry["cpu_s"], _cpu_s(pid))  # 0.0 once it is gone: its last reading stays
        time.sleep(every_s)
    return child.returncode, time.monotonic() - started, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command after --")
    code, wall_s, processes = sample(command)
    result = {"command": command, "exit": code, "wall_s": round(wall_s, 1), **summary(processes),
              "processes": processes}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "processes"}, indent=1))
    raise SystemExit(code)


if __name__ == "__main__":
    main()
