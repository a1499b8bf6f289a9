"""bench_suite_cpu: a command's processes sampled from /proc and its CPU told apart by role (the CPU
suite's cost is the judges, templates and sandboxes its runs start, which pytest never reaps)."""

import sys

from accelopt.evals.bench_suite_cpu import role, sample, summary

JUDGE = "/venv/bin/python /repo/tools/harness/judge.py"
TEMPLATE = "/venv/bin/python /repo/tools/harness/zygote.py 5"


def test_roles_and_the_judges_each_process_started():
    processes = {
        "10": {"cmd": "/venv/bin/python -m accelopt optimize T --device cpu", "parent": 1, "cpu_s": 2.0},
        "11": {"cmd": JUDGE, "parent": 10, "cpu_s": 2.5},
        "12": {"cmd": JUDGE, "parent": 10, "cpu_s": 2.4},
        "13": {"cmd": TEMPLATE, "parent": 11, "cpu_s": 2.9},
        "14": {"cmd": TEMPLATE, "parent": 13, "cpu_s": 0.2},  # forked from its template: a sandbox
        "20": {"cmd": "/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "parent": 1, "cpu_s": 90.0},
        "21": {"cmd": JUDGE, "parent": 20, "cpu_s": 3.0},
        "30": {"cmd": "/usr/bin/git describe", "parent": 20, "cpu_s": 0.1},
    }
    got = summary(processes)
    assert got["roles"]["judge"] == {"cpu_s": 7.9, "processes": 3}
    assert got["roles"]["sandbox template"] == {"cpu_s": 2.9, "processes": 1}
    assert got["roles"]["sandbox"] == {"cpu_s": 0.2, "processes": 1}
    assert got["roles"]["pytest worker"]["processes"] == 1 and got["roles"]["accelopt CLI"]["cpu_s"] == 2.0
    assert got["roles"]["other"] == {"cpu_s": 0.1, "processes": 1}
    assert got["judges_per_process"] == {1: 1, 2: 1} and got["cpu_s"] == 103.1
    assert role("/venv/bin/accelopt check T K.py", "") == "accelopt CLI"


def test_a_busy_child_is_sampled_with_its_cpu():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    code, wall_s, processes = sample([sys.executable, "-c", parent], every_s=0.05)
    assert code == 0 and wall_s >= 0.8
    burner = [p for p in processes.values() if "process_time" in p["cmd"] and "subprocess" not in p["cmd"]]
    assert len(burner) == 1 and burner[0]["cpu_s"] >= 0.6
