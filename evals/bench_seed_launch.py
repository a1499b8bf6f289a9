"""GPU diagnostic: where a seed and torch.compile differ, the kernels or the host launch path.

For one task and the seed that `bench_inductor_seeds.py --out F` kept in F (its "source"), times
per workload, with triton.testing, the seed, torch.compile(reference) and eager PyTorch two ways:
`do_bench` (calls back to back: host launch cost included wherever it falls) and
`do_bench_cudagraph` (one CUDA graph replayed: GPU time only). Outside the harness's sandbox, so
only for code that is trusted: the seed is torch.compile's own kernels.

    python evals/bench_seed_launch.py --seeds seeds.json --task rope --out rope_cudagraph.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
from pathlib import Path

TASKS = Path(__file__).resolve().parent / "tasks"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    from accelopt.tools.task import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=Path, required=True, help="bench_inductor_seeds.py's JSON")
    parser.add_argument("--task", required=True)
    parser.add_argument("--suite", type=Path, default=TASKS)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    row = next(r for r in json.loads(args.seeds.read_text()) if r["task"] == args.task and "source" in r)
    task = load_task(args.suite / args.task)
    with tempfile.TemporaryDirectory() as tmp:  # @triton.jit needs its source in a file
        (Path(tmp) / "seed.py").write_text(row["source"])
        seed = _module(Path(tmp) / "seed.py", "accelopt_seed")
        reference = _module(Path(task.root) / "reference.py", "accelopt_reference")
        compiled = torch.compile(reference.reference, dynamic=False)
        functions = {"seed": getattr(seed, task.spec.entry_point), "torch_compile": compiled,
                     "eager": reference.reference}
        out = {}
        for workload in task.spec.workloads:
            inputs = reference.make_inputs(workload.params, 0, "cuda", task.spec.dtype_for("cuda"))
            result: dict = {}
            for name, fn in functions.items():
                result[name] = {"plain_us": 1e3 * do_bench(lambda fn=fn, inputs=inputs: fn(*inputs), rep=200),
                                "cudagraph_us": 1e3 * do_bench_cudagraph(lambda fn=fn, inputs=inputs: fn(*inputs), rep=200)}
            out[workload.name] = result
            print(workload.name, json.dumps(result), flush=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
