"""`bench_harness.py throughput --checkout OLD` runs the same modes at another checkout on the same
machine: that checkout's own bench, importing its own `accelopt` (an old tree run with this one's
package first on the path would measure this one twice)."""

import json
import textwrap

from accelopt.evals.bench_harness import at_checkout, side_by_side


def test_another_checkout_s_bench_runs_its_own_package_and_the_ratio_is_this_over_it(tmp_path, monkeypatch):
    old = tmp_path / "old"
    (old / "accelopt").mkdir(parents=True)
    (old / "accelopt" / "__init__.py").write_text("MARK = 'old'\n")
    (old / "evals").mkdir()
    (old / "evals" / "bench_harness.py").write_text(textwrap.dedent('''
        import json, sys, accelopt
        args = sys.argv[1:]
        out = args[args.index("--out") + 1]
        modes = args[args.index("--modes") + 1]
        json.dump({args[0]: {modes: {"per_minute": 8.0, "accelopt": accelopt.__file__, "mark": accelopt.MARK}}},
                  open(out, "w"))
    '''))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    then = at_checkout(old, "throughput", ["--modes", "warm_sandboxes_2_submitters"])
    got = then["warm_sandboxes_2_submitters"]
    assert got["mark"] == "old" and got["accelopt"].startswith(str(old))
    now = {"warm_sandboxes_2_submitters": {"per_minute": 10.0}, "ratio_warm_vs_fresh": 3.0}
    assert side_by_side(now, then) == {"warm_sandboxes_2_submitters": 1.25}
    assert json.dumps(side_by_side(now, {})) == "{}"  # a mode the other checkout did not run: no ratio
