"""A quick look, on a GPU, at where a task's kernel stands under a grid of launch configurations:
per workload its median time (triton.testing.do_bench, L2 flushed between runs) and its share of
a same-size device copy's speed, for the kernel as written and after a tuner rewrite.

Not a verdict: nothing here runs in a sandbox, and correctness is a loose allclose against the
reference, only to keep a broken configuration out of the table. It answers "which knob, which
rewrite, how far from a copy" in a minute where the tuner's verdicts would take a quarter of an
hour; what it suggests is then measured by `accelopt optimize`.

    python evals/probe_configs.py --task evals/tasks/cross_entropy --rewrite one_pass_softmax \\
        --grid BLOCK=1024,4096 num_warps=4,8 --out probe.json
    python evals/probe_configs.py --task evals/tasks/rope --kernel my_rope_variant.py --grid num_warps=1,4
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import tempfile
from pathlib import Path

from accelopt.policies.rewrites import BY_NAME
from accelopt.tools.task import load_task
from accelopt.tools.tunables import apply_config, config_of


def module_from_source(source: str, name: str):
    """`source` imported as a module of its own, from a file (Triton's jit reads its kernels' source)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    return module_from_path(path, name)


def module_from_path(path: Path, name: str):
    """The module at `path`, imported where it lies (a KernelBench reference reads the files beside it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _close(out, expected) -> bool:
    import torch

    outs = out if isinstance(out, tuple | list) else (out,)
    wants = expected if isinstance(expected, tuple | list) else (expected,)
    return len(outs) == len(wants) and all(
        torch.allclose(o.float(), w.float(), rtol=2e-2, atol=2e-2) for o, w in zip(outs, wants, strict=True))


def probe(task_dir: Path, rewrite: str | None, grid: dict[str, list[int]], device: str = "cuda",
          only_rewritten: bool = False, kernels: tuple[Path, ...] = ()) -> list[dict]:
    import torch
    from triton.testing import do_bench

    task = load_task(task_dir)
    assert task.baseline_source is not None, "the probe starts from the task's baseline"
    reference = module_from_path(task_dir / "reference.py", "probe_reference")
    sources = {"baseline": task.baseline_source}
    if rewrite:  # one rewrite, or several in order ("one_pass_softmax,prefetch_loads")
        rewritten = task.baseline_source
        for name in rewrite.split(","):
            applied = BY_NAME[name].apply(rewritten)
            assert applied is not None, f"{name} does not apply to {task_dir} (after {rewrite})"
            rewritten = applied
        label = rewrite.replace(",", "+")
        sources = {label: rewritten} if only_rewritten else {**sources, label: rewritten}
    # hand-written variants: what a rewrite not yet built would give, before building it
    sources.update({path.stem: path.read_text() for path in kernels})
    rows = []
    for workload in task.spec.workloads_for(device):
        inputs = reference.make_inputs(workload.params, 0, device, task.spec.dtype)
        expected = reference.reference(*inputs)
        half = int(reference.bytes_moved(workload.params, task.spec.dtype) // 2)
        src, dst = torch.empty(half, dtype=torch.uint8, device=device), torch.empty(half, dtype=torch.uint8,
                                                                                       device=device)
        copy_ms = do_bench(lambda s=src, d=dst: d.copy_(s), warmup=25, rep=200, return_mode="median")
        for label, source in sources.items():
            known = config_of(source)
            names = [n for n in grid if n in known]
            for values in itertools.product(*(grid[n] for n in names)):
                config = dict(zip(names, values, strict=True))
                row: dict = {"workload": workload.name, "kernel": label, "config": {**known, **config}}
                try:
                    module = module_from_source(apply_config(source, config), f"probe_{label}")
                    ok = _close(module.run(*inputs), expected)
                    ms = do_bench(lambda m=module, i=inputs: m.run(*i), warmup=25, rep=200, return_mode="median")
                except Exception as error:  # noqa: BLE001 - a config that does not compile is a row too
                    row.update(error=f"{type(error).__name__}: {str(error)[:200]}")
                    rows.append(row)
                    continue
                row.update(correct=ok, us=1000 * ms, copy_us=1000 * copy_ms, pct_of_copy=100 * copy_ms / ms)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, required=True)
    parser.add_argument("--rewrite", help=f"also probe the baseline after this rewrite, or these in order "
                        f"(comma-separated; of {', '.join(sorted(BY_NAME))})")
    parser.add_argument("--rewritten-only", action="store_true", help="probe only the rewritten kernel")
    parser.add_argument("--kernel", type=Path, action="append", default=[],
                        help="also probe this file (a variant of the baseline with the same entry point)")
    parser.add_argument("--grid", nargs="*", default=[], help="KNOB=v1,v2,... (knobs the kernel has)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    grid = {k: [int(v) for v in vs.split(",")] for k, vs in (g.split("=", 1) for g in args.grid)}
    rows = probe(args.task, args.rewrite, grid, only_rewritten=args.rewritten_only,
                 kernels=tuple(args.kernel))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    best: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["workload"], row["kernel"])
        if row.get("correct") and (key not in best or row["us"] < best[key]["us"]):
            best[key] = row
    for (workload, kernel), row in sorted(best.items()):
        print(f"{workload:24} {kernel:20} {row['us']:9.1f} us  {row['pct_of_copy']:5.1f}% of copy  {row['config']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
