"""What `pip install .` puts into site-packages: one package, `accelopt`, with every floor, the
prompts and the bundled tasks; nothing named `graph`, `tools`, ... at the top."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT


def _build_wheel(tmp_path):
    """The wheel `pip wheel` builds, and what the build printed."""
    pytest.importorskip("setuptools")
    # built from a copy of the tracked files (3 MB), so the build leaves nothing in the repository
    source = tmp_path / "source"
    for name in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(source), "-w", str(tmp_path / "wheel")], check=True, capture_output=True, text=True,
                           timeout=300)
    return next((tmp_path / "wheel").glob("accelopt-*.whl")), built.stdout + built.stderr


def test_the_build_warns_of_nothing_and_packages_every_task_file(tmp_path):
    """The data folders (tasks, prompts, realworld solutions) are package-data, not packages that
    setuptools warns of one by one (~1,650 lines of BuildBackendWarning in `make demo`)."""
    wheel, output = _build_wheel(tmp_path)
    assert [line for line in output.splitlines() if "BuildBackendWarning" in line] == []
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "evals/tasks", "evals/nkibench", "evals/realworld", "policies/prompts"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    missing = [name for name in tracked if f"accelopt/{name}" not in names]
    assert tracked and missing == []  # e.g. the realworld tasks' data/*.safetensors inputs


def test_the_wheel_installs_one_namespace(tmp_path):
    wheel, _ = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"accelopt"}
    for path in ("accelopt/cli/app.py", "accelopt/graph/builder.py", "accelopt/nodes/records.py",
                 "accelopt/policies/interface.py", "accelopt/policies/prompts/planner.txt",
                 "accelopt/tools/harness/judge.py", "accelopt/memory/store.py", "accelopt/evals/tasks/softmax/task.json"):
        assert path in names, path
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    probe = ("import importlib.util, sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if 'site-packages' in p];"
             "print(importlib.util.find_spec('graph') is None, importlib.util.find_spec('tools') is None,"
             "importlib.util.find_spec('accelopt.graph.builder').origin)")
    out = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, check=True).stdout.split()
    assert out[:2] == ["True", "True"]
    assert out[2] == str(target / "accelopt" / "graph" / "builder.py")


# ---------------------------------------------------------------- what each of the two commands installs

def _make_dry_run(tmp_path, target: str) -> list[str]:
    """The commands `make TARGET` runs in a fresh clone (no .venv yet), without running them."""
    clone = tmp_path / "clone"
    clone.mkdir(exist_ok=True)
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy2(ROOT / name, clone / name)
    # under `make test` (CI), MAKELEVEL and MAKEFLAGS reach this make: it would say where it enters
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    out = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.splitlines()


def _installs(commands: list[str]) -> list[str]:
    return [c for c in commands if " pip install " in f" {c} " and "--upgrade pip" not in c]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_only_what_the_cli_needs_and_make_test_everything(tmp_path):
    """`make demo` from a fresh clone installs accelopt and its own dependencies, not the `dev` and
    `ray` extras (pytest, mypy, ruff, langgraph-cli, Ray: 0.35 GB of the install) nor flashinfer-bench;
    `make test` installs all of them before lint and the tests (CI's `.ci/run` is `make test`)."""
    demo = _make_dry_run(tmp_path, "demo")
    installs = _installs(demo)
    assert installs and all("[" not in c and "flashinfer-bench" not in c for c in installs), installs
    assert any(c.rstrip().endswith("-e .") for c in installs), installs
    assert demo[-1].startswith(".venv/bin/accelopt optimize evals/tasks/rmsnorm")
    test = _make_dry_run(tmp_path, "test")
    installs = _installs(test)
    assert any('-e ".[dev,ray]"' in c for c in installs) and any("flashinfer-bench" in c for c in installs), installs
    ordered = [c for c in test if " pip install " in f" {c} " or "pytest" in c or c.endswith("ruff check .")]
    assert "pytest -q" in ordered[-1] and "--durations=15" in ordered[-1]  # the tests run after every install
    # mypy runs beside them, and either failing fails the target
    assert any(c.startswith(".venv/bin/mypy > ") and c.rstrip().endswith("\\") for c in test)
    assert test[-1].startswith("wait $types") and test[-1].endswith("exit $(( tests != 0 || typed != 0 ))")


EXTRAS = ("ray", "pytest", "_pytest", "xdist", "pytest_timeout", "mypy", "ruff", "langgraph_cli", "langgraph_api",
          "langgraph_runtime_inmem", "docstring_parser", "flashinfer_bench")
BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is not installed by make demo", name=name)
sys.meta_path.insert(0, Block())
sys.argv = ["accelopt", *sys.argv[1:]]
from accelopt.cli.app import main
main()
"""


@pytest.mark.slow
def test_the_demo_runs_without_the_dev_and_ray_extras(tmp_path):
    """The demo's command, as `make demo` runs it but smaller, in a process that cannot import any
    module of the extras `make demo` no longer installs (its judges' processes are the venv's own)."""
    code = f"BLOCKED = {EXTRAS!r}\n" + BLOCK
    proc = subprocess.run([sys.executable, "-c", code, "optimize", str(ROOT / "evals" / "tasks" / "rmsnorm"), "--beams",
                           "1", "--plans", "1", "--samples", "1", "--iterations", "1", "--device", "cpu",
                           "--run-dir", str(tmp_path / "run")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**{k: v for k, v in os.environ.items() if not k.startswith("ACCELOPT_")
                                               or k == "ACCELOPT_UNCONFINED"}, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file() and "not installed by make demo" not in proc.stderr
