"""GPU benchmark: at gemm_bf16's shapes, cuBLAS against the Triton matmul templates Inductor's
max-autotune picks (issue 17): the plain template, and with the persistent TMA template allowed.

Times are `triton.testing.do_bench` (GPU time, outside the harness); it answers which Inductor
mode a matmul seed should be captured in, not how fast a seed is (bench_inductor_seeds.py).

    python evals/bench_gemm_templates.py --out gemm_templates.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SHAPES = [(4096, 6144, 4096), (4096, 4096, 14336), (128, 28672, 4096)]  # evals/tasks/gemm_bf16 (M, N, K)


def main() -> None:
    import torch
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code
    from triton.testing import do_bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    triton_only = {**torch._inductor.list_mode_options("max-autotune-no-cudagraphs"),
                   "max_autotune_gemm_backends": "TRITON"}
    modes = {"triton": triton_only, "triton_tma": {**triton_only, "triton.enable_persistent_tma_matmul": True}}
    rows = []
    for m, n, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5

        def linear(x, w):
            return x @ w.T

        row: dict = {"shape": [m, n, k], "cublas_ms": do_bench(lambda x=x, w=w: linear(x, w), warmup=50, rep=300)}
        for name, options in modes.items():
            torch._dynamo.reset()
            start = time.time()
            compiled = torch.compile(linear, options=options, dynamic=False)
            _, sources = run_and_get_code(compiled, x, w)
            row[f"{name}_ms"] = do_bench(lambda compiled=compiled, x=x, w=w: compiled(x, w), warmup=50, rep=300)
            row[f"{name}_uses_tma"] = any("make_tensor_descriptor" in s for s in sources)
            row[f"{name}_compile_s"] = round(time.time() - start, 1)
        for key in [k for k in row if k.endswith("_ms")]:
            row[key.replace("_ms", "_tflops")] = round(2 * m * n * k / row[key] / 1e9, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
