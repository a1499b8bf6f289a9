"""The sandbox is closed: a candidate writes only beneath its own folder and cannot see the
judge's, the other sandboxes', the repository's or the user's files (tools/harness/confine.py).

The probing kernel is an honest softmax whose import tries each escape; it computes the right
answer only when every attempt failed, so `verified` is the evidence that all were stopped, and
what a successful write would have left is looked for from outside as well."""

from __future__ import annotations

import json
import os
import site
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from accelopt.tools.harness import confine
from tests.scripted import BASELINE

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(confine.refusal() is not None, reason=f"no confinement here: {confine.refusal()}")]

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
import os, socket

ESCAPED = []


def _try(what, action):
    try:
        action()
        ESCAPED.append(what)
    except OSError:
        pass


def _write(path):
    with open(path, "w") as f:
        f.write("x")


_home = os.getcwd()
_try("write own folder", lambda: _write(os.path.join(_home, "mine.txt")))
if ESCAPED == ["write own folder"]:
    ESCAPED.clear()
else:
    ESCAPED.append("could not write its own folder")
for _path in {targets!r}:
    _try("write " + _path, lambda p=_path: _write(p))
for _folder in {listed!r} + [os.path.dirname(_home), "/tmp", "/dev/shm"]:
    _try("list " + _folder, lambda f=_folder: os.listdir(f))
for _path in {read!r}:
    _try("read " + _path, lambda p=_path: open(p).read())
_try("tcp", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
'''


def _probe_kernel(tmp_path: Path, token: str) -> tuple[str, list[Path]]:
    site_packages = Path(site.getsitepackages()[0])
    targets = [site_packages / f"accelopt_probe_{token}.pth", REPO / f"probe_{token}",
               Path(sys.prefix) / f"probe_{token}", tmp_path / f"probe_{token}", Path("/tmp") / f"probe_{token}"]
    listed = [str(REPO), str(Path.home()), str(tmp_path)]
    read = [str(REPO / "README.md"), str(tmp_path / "secret.txt")]
    (tmp_path / "secret.txt").write_text("api key")
    prelude = PROBE.format(targets=[str(t) for t in targets], listed=listed, read=read)
    # wrong by a factor of two whenever any attempt got through: the verdict reports it
    body = BASELINE.replace("    return out", "    if ESCAPED:\n        out.mul_(2)\n    return out")
    assert body != BASELINE
    return prelude + body, targets


def test_a_candidate_cannot_write_or_look_outside_its_own_folder(softmax_task, tmp_path):
    token = os.urandom(4).hex()
    source, targets = _probe_kernel(tmp_path, token)
    kernel = tmp_path / "probe.py"
    kernel.write_text(source)
    out = CliRunner().invoke(app, ["check", str(softmax_task), str(kernel), "--device", "cpu", "--json"])
    result = json.loads(out.output)
    assert result["status"] == "verified", result["error"]
    assert not [t for t in targets if t.exists()]


def test_the_probe_can_fail_unconfined(softmax_task, tmp_path, monkeypatch):
    """Without confinement the same kernel is caught escaping: the test above can fail."""
    monkeypatch.setenv(confine.UNCONFINED_ENV, "1")
    from accelopt.tools.harness.pool import make_pool
    from accelopt.tools.harness.runner import evaluate
    from accelopt.tools.task import load_task

    token = os.urandom(4).hex()
    source, targets = _probe_kernel(tmp_path, token)
    pool = make_pool("cpu", 0)
    try:
        result = evaluate(load_task(softmax_task), source, device="cpu", pool=pool, compare={})
        written = [t for t in targets if t.exists()]
    finally:
        pool.close()
        for t in targets:
            t.unlink(missing_ok=True)
    assert result.status != "verified" and written


def test_refused_with_the_reason_where_it_cannot_be_set_up(monkeypatch):
    monkeypatch.setattr(confine, "bwrap_binary", lambda: None)
    confine.refusal.cache_clear()
    try:
        reason = confine.refusal()
        assert reason and "bubblewrap" in reason
        assert confine.UNCONFINED_ENV in confine.refusal_message(reason)
        with pytest.raises(confine.ConfinementError, match="refusing to run candidate kernels unconfined"):
            from accelopt.tools.harness.pool import make_pool

            make_pool("cpu", 0)
    finally:
        confine.refusal.cache_clear()
