"""Recall latency of the insight memory at 1k and 10k insights, embedding included.

    python evals/bench_memory.py --sizes 1000 10000 --queries 200
Synthetic insights are built from templates (kernels x techniques x shapes) so that the store
has many near-but-distinct lessons; queries are task descriptions the planner would send.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from accelopt.memory.schema import Evidence, Insight, Provenance
from accelopt.memory.store import InsightStore

KERNELS = ["rmsnorm", "layernorm", "softmax", "rope", "silu_and_mul", "gemm_bf16", "paged_decode", "top_k",
           "cross_entropy", "fused_add_rmsnorm", "moe_gate", "transpose"]
TECHNIQUES = ["raise num_warps", "lower num_warps", "larger BLOCK", "smaller BLOCK", "more pipeline stages",
              "single pass over the row", "vectorized 16-byte loads", "split-K", "persistent programs",
              "tile swizzling for L2 reuse", "fold the scale into exp2", "fuse the epilogue", "online softmax",
              "avoid atomics", "precompute the inverse", "cache weights in registers"]


def synthetic(n: int) -> list[Insight]:
    out = []
    for i in range(n):
        kernel, technique = KERNELS[i % len(KERNELS)], TECHNIQUES[(i // len(KERNELS)) % len(TECHNIQUES)]
        shape = 1024 * (1 + i % 16)
        out.append(Insight(
            kind="positive" if i % 5 else "negative", title=f"{technique} for {kernel} at {shape}",
            lesson=f"On {kernel} with hidden size {shape}, {technique} changed latency because of variant {i}.",
            kernel_class=kernel, bottleneck=["memory bandwidth", "latency", "occupancy"][i % 3],
            evidence=Evidence(speedup=1.05 + (i % 40) / 100, spread=0.01, hardware="NVIDIA H200",
                              timer="cuda_event", task=kernel, backend="triton"),
            provenance=Provenance(run_id=f"bench-{i // 100}", parent_id=f"p{i}", child_id=f"c{i}", iteration=1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print("| insights | insert s | recall p50 ms | recall p95 ms | queries |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = InsightStore(tmp, capacity=size * 2)
            start = time.perf_counter()
            items = synthetic(size)
            vectors = store.embedder.embed([f"{i.title}. {i.lesson}" for i in items])
            # Bulk load without the per-item duplicate check: this measures recall, not insertion.
            for chunk in range(0, size, 500):
                for insight, vector in zip(items[chunk:chunk + 500], vectors[chunk:chunk + 500]):
                    store._upsert(insight, vector, recalls=0)
            insert_s = time.perf_counter() - start
            latencies = []
            for q in range(args.queries):
                query = (f"{KERNELS[q % len(KERNELS)]} kernel, memory-bound row reduction with hidden size "
                         f"{1024 * (1 + q % 8)}; bottleneck {['memory bandwidth', 'latency'][q % 2]}")
                t = time.perf_counter()
                store.recall(query, backend="triton", timer="cuda_event", k=5)
                latencies.append((time.perf_counter() - t) * 1e3)
            p95 = statistics.quantiles(latencies, n=20)[-1]
            print(f"| {size} | {insert_s:.0f} | {statistics.median(latencies):.1f} | {p95:.1f} | {args.queries} |")


if __name__ == "__main__":
    main()
