"""What tools/tracing.py sends of a payload and an error, and the langsmith behaviour it rests on."""

import hashlib
import json
import threading

from langsmith import Client, run_trees

from accelopt.tools.tracing import HEAD, MAX_ERROR, MAX_STRING, TracedClient, _why, compact, run_error
from tests.langsmith_endpoint import LangSmithEndpoint

TRACEBACK = ("Traceback (most recent call last):\n"
             + "".join(f'  File "/sandbox/kernel.py", line {i}, in frame_{i}\n    call_{i}()\n' for i in range(80))
             + "triton.runtime.errors.InterpreterError: NameError(\"name 'nume' is not defined\")")


def _candidate(i: int) -> dict:
    """A candidate as the state holds it: its source, its error, its measurements."""
    source = f"# kernel {i}\n" + "x = tl.load(ptr + offsets, mask=mask)\n" * 80
    return {"id": f"i1.m0.p{i}.k0", "iteration": 1, "parent_id": "baseline", "plan_id": f"i1.m0.p{i}",
            "plan_title": "fuse the two passes", "source": source, "status": "runtime_error", "error": TRACEBACK,
            "speedup": None, "workloads": {"T4096": {"median_us": 12.5, "iqr_us": 0.3, "samples": 20}},
            "findings": [{"kind": "advice", "text": "coalesce the loads " * 10}], "flags": [], "eval_s": 1.5}


def test_long_strings_keep_their_head_and_errors_their_end():
    source = "x" * (MAX_STRING + 1)
    out = compact({"source": source, "error": TRACEBACK, "ids": list(range(100))})
    sha = hashlib.sha256(source.encode()).hexdigest()[:12]
    assert out["source"] == f"{source[:HEAD]}… [{len(source)} chars, sha256 {sha}]"
    assert len(TRACEBACK) > MAX_STRING and out["error"].endswith("NameError(\"name 'nume' is not defined\")")
    assert f"[{len(TRACEBACK)} chars, sha256 " in out["error"] and len(out["error"]) < MAX_STRING
    assert len(out["ids"]) == 41 and out["ids"][-1] == "… 60 more"


def test_a_state_payload_grows_by_a_summary_per_candidate():
    """The state a node gets holds every candidate: whole, a trace of a long run is megabytes."""
    def size(n: int) -> int:
        state = {"task_dir": "evals/tasks/rmsnorm", "candidates": {c["id"]: c for c in map(_candidate, range(n))}}
        return len(json.dumps(compact(state)))

    per_candidate = (size(60) - size(10)) / 50
    assert len(json.dumps(_candidate(0))) > 3000  # what a candidate weighs in state
    assert per_candidate < 120, per_candidate
    summary = compact({"candidates": {"a": _candidate(0)}})["candidates"]["a"]
    assert summary == {"status": "runtime_error", "speedup": None}


def test_a_failed_candidate_makes_a_run_error_that_ends_with_its_exception():
    error = run_error({"status": "runtime_error", "error": TRACEBACK * 3})
    assert error.startswith("runtime_error: …") and error.endswith("NameError(\"name 'nume' is not defined\")")
    assert len(error) <= MAX_ERROR + len("runtime_error: …")
    assert run_error({"status": "no_code", "error": None}) == "no_code"
    for fine in ({"status": "verified"}, {"status": "duplicate", "error": "the same program as x"},
                 {"status": "not_sent", "error": "budget"}, {"status": None}):
        assert run_error(fine) is None, fine


def test_a_failed_send_is_said_in_a_few_words():
    refused = ("Connection error caused failure to POST http://127.0.0.1:9/runs/multipart in LangSmith API. Please "
               "confirm your LANGCHAIN_ENDPOINT. ConnectionError(MaxRetryError(\"HTTPConnectionPool(host='127.0.0.1', "
               "port=9): Max retries exceeded (Caused by NewConnectionError('[Errno 111] Connection refused'))\"))\n"
               "Content-Length: 6564\nAPI Key: kk" + "trace=a,id=b; " * 50)
    assert _why(refused) == "connection refused"
    assert _why("Authentication failed. HTTPError('403 Client Error: Forbidden for url: http://x/runs')") == \
        "HTTP 403 Forbidden"


def test_the_langsmith_internals_tracing_rests_on_are_there():
    """A langsmith upgrade that renames these would silently undo a fix: the process client we
    adopt, the slot our daemon property shadows, the hook a failed send calls."""
    assert hasattr(run_trees, "_CLIENT")
    assert "_use_daemon_threads" in Client.__slots__ and callable(Client._invoke_tracing_error_callback)
    before = set(threading.enumerate())
    with LangSmithEndpoint() as endpoint:
        client = TracedClient(api_url=endpoint.url, api_key="test-key")
        assert client.info is not None  # asked now, while the endpoint answers, not by the thread later
        started = set(threading.enumerate()) - before
        assert started and all(t.daemon for t in started), "a sender thread that holds the process at exit"
    plain = Client(api_url=endpoint.url, api_key="test-key", auto_batch_tracing=False)
    plain.__class__ = TracedClient  # how a client made before ours is adopted
    assert isinstance(plain, TracedClient) and plain.api_url == endpoint.url
