"""A Triton cache written by candidate code is copied as untrusted (tools/harness/triton_cache.py):
a link planted in it never carries the file it names into the next process's cache."""

import os

from accelopt.tools.harness import triton_cache


def test_a_planted_link_does_not_carry_what_it_names(tmp_path):
    secret = tmp_path / "secret.txt"  # what the harness may read and the candidate may not
    secret.write_text("API_KEY=hunter2")
    cache = tmp_path / "sandbox" / "triton-cache"
    (cache / "KEY").mkdir(parents=True)
    (cache / "KEY" / "k.cubin").write_bytes(b"\x7fELF")
    (cache / "KEY" / "stolen.cubin").symlink_to(secret)
    os.link(secret, cache / "KEY" / "linked.json")
    (cache / "LINKED").symlink_to(tmp_path, target_is_directory=True)
    copied = tmp_path / "recheck" / "triton-cache"
    assert triton_cache.copy_files(str(cache), str(copied)) == ["KEY/k.cubin"]
    assert sorted(p.name for p in copied.rglob("*")) == ["KEY", "k.cubin"]
    assert not any("hunter2" in p.read_text(errors="replace") for p in copied.rglob("*") if p.is_file())


def test_a_missing_cache_is_none_and_a_bound_leaves_the_rest_out(tmp_path):
    assert triton_cache.copy_files(str(tmp_path / "missing"), str(tmp_path / "to")) is None
    cache = tmp_path / "cache"
    (cache / "A").mkdir(parents=True)
    (cache / "A" / "a.cubin").write_bytes(b"x" * 100)
    (cache / "A" / "b.cubin").write_bytes(b"x" * 100)
    assert triton_cache.copy_files(str(cache), str(tmp_path / "to"), max_bytes=150) == ["A/a.cubin"]
