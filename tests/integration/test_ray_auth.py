"""Ray's token authentication, against one real head started as the README says (`ray get-auth-token
--generate`, then `ray start --head`): a driver that names the head by HOST:PORT connects with the
token from its environment (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token), and `auto` on
the head's own machine finds it; without the token, or with a wrong one, the error is one line that
says how to pass it, after a few seconds rather than Ray's 20 retries; a closed port still cannot be
reached. The drivers are processes of their own with an empty HOME: another machine's driver."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, TASKS, still_alive

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "accelopt[ray]")')

from accelopt.tools.harness import ray_pool  # noqa: E402

pytestmark = pytest.mark.slow

RAY_CLI = Path(sys.executable).with_name("ray")  # the CLI of the Ray this Python imports
MARK = "ACCELOPT_TEST_RAY_HEAD"  # in the environment of every process of the head: found again at the end
TOKEN_VARS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS", "ACCELOPT_RAY_ADDRESS")

# What a driver runs: connect as accelopt does, then a task on the cluster and the doctor's summary
# (the state API goes through the dashboard, which checks the token too).
DRIVER = """
import json, sys, time
import ray
from accelopt.tools.harness import ray_pool
started = time.monotonic()
try:
    ray_pool.connect(sys.argv[1])
except ray_pool.ClusterError as e:
    print(json.dumps({"error": str(e), "s": time.monotonic() - started}))
    sys.exit(2)
answer = ray.get(ray.remote(lambda: 42).remote())
print(json.dumps({"answer": answer, "summary": ray_pool.cluster_summary(sys.argv[1])}))
"""


@dataclass(frozen=True)
class Head:
    address: str      # 127.0.0.1:PORT
    token: str        # what `ray get-auth-token` prints on the head
    root: Path        # the head's HOME, RAY_TMPDIR and log, and the drivers' homes, beneath it
    env: dict[str, str]  # the head machine's environment: its HOME holds the token


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TOKEN_VARS}
    return {**env, **extra}


def _ours(root: Path) -> set[int]:
    """The live processes whose environment carries this head's mark (reparented ones included)."""
    needle = f"{MARK}={root}".encode()
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.add(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found - {os.getpid()}


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    if not RAY_CLI.is_file():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    # Short: the head's Unix sockets live beneath its RAY_TMPDIR (Ray's own temp dir: TMPDIR would move
    # the judges' too), which also keeps it off /tmp/ray, where another cluster's `auto` looks.
    # `ray stop` is not used: it stops every cluster of the user.
    root = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    (root / "head").mkdir()
    (root / "tmp").mkdir()
    env = _base_env(HOME=str(root / "head"), RAY_TMPDIR=str(root / "tmp"), **{MARK: str(root)})
    # The README's steps. A head turns authentication on when it holds a token (Ray 2.59/2.60;
    # from 2.61 always).
    token = subprocess.run([str(RAY_CLI), "get-auth-token", "--generate"], env=env, check=True, capture_output=True,
                           text=True, timeout=120).stdout.strip()  # it prints the token, as plain `get-auth-token` does
    assert token and token == (root / "head" / ".ray" / "auth_token").read_text().strip()
    port = _free_port()
    # Its other well-known ports are free ones: another cluster of this machine may hold the defaults.
    cmd = [str(RAY_CLI), "start", "--head", "--port", str(port), "--num-cpus", "1", "--block",
           "--disable-usage-stats", "--ray-client-server-port", str(_free_port()),
           "--dashboard-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port())]
    log_path = root / "head.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, f"ray start --head exited {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"ray start --head did not start:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        yield Head(f"127.0.0.1:{port}", token, root, env)
    finally:
        # --block: on SIGTERM `ray start` stops the head's processes and their workers itself.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = still_alive(_ours(root), within_s=15)
        for pid in left:  # ours by the mark: never a process of another test or another user
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes of the Ray head outlived `ray start --block`'s SIGTERM: {left}"


def _driver_env(head: Head, **extra: str) -> dict[str, str]:
    """Another machine: an empty HOME (no ~/.ray/auth_token) and a RAY_TMPDIR without the head in it."""
    home = Path(tempfile.mkdtemp(prefix="driver-", dir=head.root))
    (home / "tmp").mkdir()
    return _base_env(HOME=str(home), RAY_TMPDIR=str(home / "tmp"), **{MARK: str(head.root)}, **extra)


def _run_all(runs: dict[str, tuple[list[str], dict[str, str]]], timeout_s: float = 180) -> dict:
    """Several driver processes at once (each mostly waits on its imports): name -> (rc, stdout, stderr)."""
    procs = {name: subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (cmd, env) in runs.items()}
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=timeout_s)
        out[name] = (p.returncode, stdout, stderr)
    return out


def test_the_token_from_the_environment_connects(head):
    token_file = head.root / "token"
    token_file.write_text(head.token + "\n")
    home_with_token = _driver_env(head)
    (Path(home_with_token["HOME"]) / ".ray").mkdir()
    (Path(home_with_token["HOME"]) / ".ray" / "auth_token").write_text(head.token)
    driver = [sys.executable, "-c", DRIVER]
    runs = {
        "RAY_AUTH_TOKEN": (driver + [head.address], _driver_env(head, RAY_AUTH_TOKEN=head.token)),
        "RAY_AUTH_TOKEN_PATH": (driver + [head.address], _driver_env(head, RAY_AUTH_TOKEN_PATH=str(token_file))),
        "~/.ray/auth_token": (driver + [head.address], home_with_token),
        # the README's `--cluster ray` on the head: its HOME and RAY_TMPDIR, no token in the environment
        "auto on the head": (driver + ["auto"], {**head.env}),
    }
    for name, (rc, stdout, stderr) in _run_all(runs).items():
        assert rc == 0, f"{name}: rc {rc}\n{stdout}\n{stderr[-3000:]}"
        got = json.loads(stdout.strip().splitlines()[-1])
        assert got["answer"] == 42, name
        assert len(got["summary"]["nodes"]) == 1 and got["summary"]["cpus"] == 1, (name, got)
        assert got["summary"]["actors_alive"] >= 0, f"{name}: the state API was refused: {got}"
        assert "InvalidAuthToken" not in stderr, f"{name}: {stderr[-2000:]}"


def test_without_the_right_token_the_error_says_how_to_pass_it(head, tmp_path):
    cli = [sys.executable, "-m", "accelopt", "optimize", str(TASKS / "rmsnorm"), "--device", "cpu", "--no-memory",
           "--ray-address", head.address, "--run-dir", str(tmp_path / "r")]
    runs = {
        "no token": (cli, _driver_env(head)),
        "wrong token": ([sys.executable, "-c", DRIVER, head.address], _driver_env(head, RAY_AUTH_TOKEN="0" * 32)),
    }
    got = _run_all(runs)

    rc, stdout, stderr = got["no token"]
    assert rc == 2, f"{stdout}\n{stderr[-3000:]}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]  # Ray's refused attempts are not shown around it
    assert f"the Ray cluster at {head.address} requires an authentication token" in lines[0], lines[0]
    assert "ray get-auth-token" in lines[0] and "RAY_AUTH_TOKEN" in lines[0], lines[0]
    assert "cannot reach" not in lines[0], lines[0]

    rc, stdout, stderr = got["wrong token"]
    assert rc == 2, f"{stdout}\n{stderr[-3000:]}"
    refusal = json.loads(stdout.strip().splitlines()[-1])
    assert "refused the authentication token in RAY_AUTH_TOKEN" in refusal["error"], refusal
    assert "ray get-auth-token" in refusal["error"], refusal
    # Ray alone retries a refused token 20 times, a second apart
    assert refusal["s"] < 15, f"the refusal took {refusal['s']:.1f} s"
    assert "InvalidAuthToken" not in stderr, stderr[-2000:]


def test_a_closed_port_still_cannot_be_reached(monkeypatch):
    """With a token at hand, so that nothing about tokens colours the answer."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 32)
    port = _free_port()  # nothing listens there once the probe socket is closed
    with pytest.raises(ray_pool.ClusterError) as err:
        ray_pool.connect(f"127.0.0.1:{port}")
    message = str(err.value)
    assert message.startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port}: nothing answers"), message
    assert "token" not in message, message


def test_a_web_port_such_as_the_dashboard_is_refused_at_once_as_not_the_cluster():
    """An address at Ray's dashboard (8265, HTTP) hung 207 s behind raw gRPC warnings before
    "cannot reach": a port that answers as a web server is said to be one, in a second."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        began = time.monotonic()
        with pytest.raises(ray_pool.ClusterError) as err:
            ray_pool.connect(f"127.0.0.1:{server.server_port}")
        assert time.monotonic() - began < 10
        assert "is a web server" in str(err.value) and "6379" in str(err.value), err.value
    finally:
        server.shutdown()
        server.server_close()


def test_the_refusal_is_read_from_every_place_ray_puts_it():
    """Each text as Ray 2.60 writes it: the GCS's status in the cause's text and on stderr, and the
    Ray Client's debug line (its ray:// refusal takes Ray's 30 s of retries: not run here)."""
    gcs = RuntimeError("Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
                       "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token "
                       "is missing or incorrect.")
    wrapped = ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:6379")
    wrapped.__cause__ = gcs
    assert ray_pool._refused(wrapped, [])
    stderr = ("[2026-11-25 15:15:30,664 W 26673 26673] gcs_client.cc:210: Failed to get cluster ID from GCS "
              "server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect\n")
    assert ray_pool._refused(ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:6379"), [stderr])
    assert ray_pool._refused(ConnectionError("ray client connection timeout"),
                             ["Received when checking init: Invalid or missing authentication token"])
    # not a token: a port that answers but is not Ray's
    other = ("[2026-11-25 15:40:19,528 W 11550 11550] rpc_client.h:153: Failed to connect to GCS at address "
             "192.0.2.2:38555 within 5 seconds.\n")
    assert not ray_pool._refused(ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:38555"), [other])
    assert not ray_pool._refused(ConnectionError("ray client connection timeout"), [])
