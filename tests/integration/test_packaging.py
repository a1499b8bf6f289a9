"""What `pip install .` puts into site-packages: one package, `accelopt`, with every floor, the
prompts and the bundled tasks; nothing named `graph`, `tools`, ... at the top."""

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
