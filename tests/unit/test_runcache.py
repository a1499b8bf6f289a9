from accelopt.tools.runcache import RunCache, device_fingerprint, digest


def test_what_changes_a_measurement_changes_the_cache_key(monkeypatch):
    monkeypatch.delenv("ACCELOPT_TRAINIUM", raising=False)
    base = digest(device_fingerprint("auto"))
    assert digest(device_fingerprint("auto")) == base
    assert digest(device_fingerprint("cpu")) != base
    monkeypatch.setenv("ACCELOPT_TRAINIUM", "trn2")  # another chip: another % of peak
    assert digest(device_fingerprint("auto")) != base


def test_the_cache_keeps_what_it_was_given(tmp_path):
    cache = RunCache(tmp_path)
    assert cache.get("evals", "k") is None
    cache.put("evals", "k", {"status": "verified"})
    assert RunCache(tmp_path).get("evals", "k") == {"status": "verified"}
    assert RunCache(None).get("evals", "k") is None  # no run dir: nothing cached


def test_a_claim_has_one_owner_across_threads_and_restarts(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        owners = set(pool.map(lambda i: RunCache(tmp_path).claim("programs", "p", f"c{i}"), range(32)))
    assert len(owners) == 1
    first = owners.pop()
    assert RunCache(tmp_path).claim("programs", "p", "later") == first  # a resumed run sees the same owner
    assert RunCache(tmp_path).claim("programs", "q", "later") == "later"
    assert RunCache(None).claim("programs", "p", "x") == "x"  # no run dir: nothing to share


def test_a_program_is_evaluated_once_in_a_run_whatever_its_comments_or_layout(tmp_path, monkeypatch):
    from accelopt.nodes import services
    from accelopt.nodes.context import RunContext

    calls = []

    def fake_measure(task, source, *args, **kwargs):
        calls.append(source)
        return {"status": "verified", "device": "cpu"}

    class FakeTask:
        reference_source = "ref"

        class spec:
            @staticmethod
            def model_dump():
                return {}

    monkeypatch.setattr(services, "_measure", fake_measure)
    ctx, run = RunContext(device="cpu"), str(tmp_path)
    first = "def run(x):\n    return x + 1\n"
    same = "# a comment\ndef run(x):\n\n    return x+1  # spaced differently\n"
    other = "def run(x):\n    return x + 2\n"
    assert services.measure(FakeTask, first, ctx, baseline=None, parent=None, run_dir=run, candidate_id="a")["status"] \
        == "verified"
    again = services.measure(FakeTask, same, ctx, baseline=None, parent=None, run_dir=run, candidate_id="b")
    assert again["status"] == "duplicate" and again["duplicate_of"] == "a" and "already evaluated" in again["error"]
    assert services.measure(FakeTask, other, ctx, baseline=None, parent=None, run_dir=run,
                            candidate_id="c")["status"] == "verified"
    # the first owner, replayed after a resume, is measured (from the cache), not called a duplicate of itself
    assert services.measure(FakeTask, first, ctx, baseline=None, parent=None, run_dir=run, candidate_id="a")["status"] \
        == "verified"
    assert calls == [first, other]
