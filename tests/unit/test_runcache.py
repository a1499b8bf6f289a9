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
