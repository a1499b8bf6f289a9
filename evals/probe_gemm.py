"""A quick look, on a GPU, at gemm_bf16's Inductor seed against cuBLAS under variants of its
persistent TMA template: the K loop or the tile loop warp-specialized (`tl.range(...,
warp_specialize=True)`), the output stored through a tensor descriptor, other tiles and launch
configurations. Per workload: do_bench median (L2 flushed), TFLOP/s, and the ratio to cuBLAS
(`x @ w.T`) timed in the same process.

Not a verdict (no sandbox, a loose allclose only to keep a broken variant out of the table): it
answers "is there a Triton kernel past cuBLAS at these shapes, and which change finds it" before
a rewrite is built and measured by `accelopt optimize`.

    python evals/probe_gemm.py --ws none,inner,outer --store ptr,tma --tiles 256x128x64,128x256x64 \\
        --warps 4,8 --stages 3,4 --out probe_gemm.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

from accelopt.evals.probe_configs import module_from_source
from accelopt.tools.inductor_seed import seed_source

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/inductor/gemm_bf16.triton.json"
SHAPES = {0: (4096, 6144, 4096), 1: (4096, 4096, 14336)}  # the seed's persistent-TMA workloads (M, N, K)


def _kernel_span(source: str, index: int) -> tuple[int, int]:
    start = source.index(f"def triton_tem_fused_mm_permute_0_w{index}(")
    return start, source.index(f"\ndef _call_{index}(", start)


def variant(source: str, index: int, ws: str, store: str, tiles: tuple[int, int, int], warps: int,
            stages: int) -> str:
    """The seed's module with workload `index`'s kernel and launch changed as asked."""
    start, end = _kernel_span(source, index)
    body = source[start:end]
    for name, value in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tiles, strict=True):
        body = re.sub(rf"{name} : tl.constexpr = \d+", f"{name} : tl.constexpr = {value}", body)
    if ws == "inner":
        body = body.replace("tl.range(0, K, BLOCK_K)", "tl.range(0, K, BLOCK_K, warp_specialize=True)")
    elif ws == "outer":
        body = body.replace("tl.range(start_pid, num_tiles, NUM_SMS)",
                            "tl.range(start_pid, num_tiles, NUM_SMS, warp_specialize=True)")
    if store == "tma":
        body = body.replace(
            "    for tile_id in",
            "    c_desc = triton.language.make_tensor_descriptor(base=out_ptr0, shape=[M, N], strides=[N, 1],\n"
            "                                                   block_shape=[BLOCK_M, BLOCK_N])\n"
            "    for tile_id in", 1)
        body = re.sub(r"\n        tl\.store\(out_ptr0 \+ .*\n",
                      "\n        c_desc.store([rm, rn], acc.to(out_ptr0.dtype.element_ty))\n", body)
    launch_start = end
    launch_end = source.index("return (buf0,)", launch_start)
    launch = re.sub(r"num_warps=\d+, num_stages=\d+", f"num_warps={warps}, num_stages={stages}",
                    source[launch_start:launch_end])
    return source[:start] + body + launch + source[launch_end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ws", default="none,inner,outer")
    parser.add_argument("--store", default="ptr,tma")
    parser.add_argument("--tiles", default="256x128x64,128x256x64")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--stages", default="3,4")
    parser.add_argument("--workloads", default="0,1")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch
    from triton.testing import do_bench

    seed = seed_source(json.loads(FIXTURE.read_text())).source
    rows: list[dict] = []
    for index in (int(i) for i in args.workloads.split(",")):
        m, n, k = SHAPES[index]
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        expected = x @ w.T
        cublas_ms = do_bench(lambda x=x, w=w: x @ w.T, warmup=50, rep=300)
        tflops = 2 * m * n * k / 1e9
        print(f"M{m} N{n} K{k}: cuBLAS {cublas_ms * 1e3:.1f} us, {tflops / cublas_ms:.0f} TFLOP/s", flush=True)
        grid = itertools.product(args.ws.split(","), args.store.split(","), args.tiles.split(","),
                                 (int(v) for v in args.warps.split(",")), (int(v) for v in args.stages.split(",")))
        for ws, store, tile, warps, stages in list(grid):
            m_tile, n_tile, k_tile = (int(v) for v in tile.split("x"))
            tiles = (m_tile, n_tile, k_tile)
            row = {"shape": [m, n, k], "ws": ws, "store": store, "tiles": tile, "num_warps": warps,
                   "num_stages": stages, "cublas_ms": cublas_ms}
            try:
                module = module_from_source(variant(seed, index, ws, store, tiles, warps, stages), f"gemm_{len(rows)}")
                out = module.run(x, w)
                row["correct"] = bool(torch.allclose(out.float(), expected.float(), rtol=2e-2, atol=2e-2))
                if row["correct"]:
                    row["ms"] = do_bench(lambda module=module, x=x, w=w: module.run(x, w), warmup=50, rep=300)
                    row["tflops"] = tflops / row["ms"]
                    row["vs_cublas"] = cublas_ms / row["ms"]
            except Exception as error:  # a variant Triton refuses stays in the table with its reason
                row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            rows.append(row)
            shown = f"{row['vs_cublas']:.3f}x cuBLAS, {row['tflops']:.0f} TFLOP/s" if "ms" in row else \
                row.get("error", "wrong result")
            print(f"  ws={ws:5} store={store:3} tiles={tile:10} warps={warps} stages={stages}: {shown}", flush=True)
            if args.out:  # after every row: a probe cut off by its time limit keeps what it measured
                args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
