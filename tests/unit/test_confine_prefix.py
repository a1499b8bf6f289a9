"""A one-off confined process (the audit, the compile-ahead pass) gets a private /tmp; Python, its
packages and tools/ (the harness's scripts and the settings they load), where a checkout cloned under /tmp put them, are bound back
in, or the process finds no interpreter ("bwrap: execvp .../.venv/bin/python: No such file")."""

import os
import tempfile

import pytest

from accelopt.tools.harness import confine


def test_python_under_tmp_is_bound_back_into_a_private_tmp(monkeypatch):
    if confine.bwrap_binary() is None:
        pytest.skip("no bubblewrap here")
    with tempfile.TemporaryDirectory(dir="/tmp") as venv:
        monkeypatch.setattr(confine, "python_folders", lambda: [os.path.realpath(venv), "/usr/lib/python3"])
        cmd = confine.bwrap_prefix("/tmp/x", ("/tmp/task",), private_tmp=True)
        after = cmd[cmd.index("--tmpfs"):]
        binds = [after[i + 1] for i, arg in enumerate(after) if arg == "--ro-bind"]
        assert os.path.realpath(venv) in binds and "/tmp/task" in binds
        assert "/usr/lib/python3" not in binds  # not hidden: / is bound read-only already
        tools = os.path.dirname(os.path.dirname(os.path.abspath(confine.__file__)))
        assert (tools in binds) == tools.startswith("/tmp/")
