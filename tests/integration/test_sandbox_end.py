"""A candidate's sandbox ends in two steps (judge_sandboxes.Sandboxes.end): killed before its
verdict is sent, then, on a thread of its own, its exit awaited and its folder removed, so that
neither the verdict nor the judge's next request waits for a GPU context's teardown."""

import os
import time

import pytest


@pytest.fixture
def sandboxes(monkeypatch):
    from accelopt.tools.harness.judge_sandboxes import Sandboxes

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the template's CPU branch, as the CPU judge runs it
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", "/tmp"))  # Sandboxes points it at its own folder
    boxes = Sandboxes("cpu", confined=False)
    yield boxes
    boxes.close()


def test_an_ended_sandbox_is_killed_at_once_then_reaped_and_its_folder_removed(sandboxes, tmp_path):
    box = sandboxes.take([str(tmp_path)])
    box.wait_ready(time.monotonic() + 120)
    assert box.proc.poll() is None and os.path.isdir(box.home)
    sandboxes.end(box)
    ending = sandboxes.ending[-1]
    ending.join(timeout=15)
    assert not ending.is_alive()
    assert box.proc.returncode == -9  # SIGKILL, reported by the template that reaped it
    assert not os.path.exists(box.home)
    assert not os.path.exists(f"/proc/{box.proc.pid}")  # reaped: no zombie left behind
