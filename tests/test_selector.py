"""The elitist, noise-aware beam."""

from nodes.selector import rank


def cand(cid, speedup, parent=None, beats=False, status="verified"):
    return cid, {"id": cid, "speedup": speedup, "parent_id": parent, "beats_parent": beats, "status": status}


def test_noise_is_not_a_win_and_the_best_is_never_lost():
    cands = dict([cand("baseline", 1.0), cand("a", 1.30, "baseline", beats=True),
                  cand("b", 1.33, "a", beats=False),        # nominally faster than a, within noise
                  cand("c", 1.50, "a", beats=True),          # really faster
                  cand("d", 9.0, "a", status="wrong_output")])
    assert rank(cands, list(cands)) == ["c", "a", "b", "baseline"]
    # Without c, a keeps first place over its noisy child b.
    assert rank(cands, ["baseline", "a", "b"])[0] == "a"
