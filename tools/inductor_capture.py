"""What torch.compile (Inductor) makes of a task's reference, captured on a CUDA GPU.

Inductor emits Triton only for CUDA devices, so a capture needs a GPU. For each workload it
compiles the reference (static shapes), keeps the generated wrapper module's source, the order
in which that module takes the reference's arguments, and the launch configuration Inductor's
own autotuner picked for each kernel. `tools/inductor_seed.py` turns captures into a standalone
candidate module; the capture is data (JSON), so seeds can be rebuilt and tested anywhere.

Run as `python -m accelopt.tools.inductor_capture TASK_DIR OUT.json [--mode M]`: the compile
runs in a process of its own, so a crash in Inductor costs only the capture.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import sys
import traceback
from pathlib import Path
from typing import Any
from unittest.mock import patch

from accelopt.tools.harness import device_lease
from accelopt.tools.inductor_seed import graph_argument_positions
from accelopt.tools.task import Task, Workload, load_task

MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune-triton")


def mode_options(mode: str) -> dict[str, Any]:
    """Inductor config patches for a mode; `max-autotune-triton` keeps matmuls in Triton
    templates (no cuBLAS), so they can become seeds, and lets the autotuner try the persistent
    TMA template too (on an H100 it closes most of the gap to cuBLAS that the plain template
    leaves on large GEMMs; Inductor offers it only where the GPU has TMA)."""
    import torch

    if mode == "default":
        return {}
    if mode == "max-autotune-triton":
        return {**torch._inductor.list_mode_options("max-autotune-no-cudagraphs"), "max_autotune_gemm_backends": "TRITON",
                "triton.enable_persistent_tma_matmul": True}
    return dict(torch._inductor.list_mode_options(mode))


def _reference_module(task: Task) -> Any:
    spec = importlib.util.spec_from_file_location("accelopt_capture_reference", Path(task.root) / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chosen_configs(source: str, inputs: list) -> dict[str, dict]:
    """Load the generated module, run it once (Inductor autotunes on the first call) and read
    the configuration each kernel launches with."""
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    module = PyCodeCache.load(source)
    module.call(list(inputs))
    chosen: dict[str, dict] = {}
    for name, value in vars(module).items():
        if isinstance(value, CachingAutotuner) and value.launchers:
            config = getattr(value.launchers[0], "config", None)
            if config is not None:
                chosen[name] = {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
                                "num_stages": config.num_stages,
                                "configs_considered": len(getattr(value, "configs", []) or [])}
    return chosen


def capture_workload(reference: Any, workload: Workload, inputs: tuple, mode: str) -> dict[str, Any]:
    import torch
    from torch._inductor.compile_fx import compile_fx

    options = mode_options(mode)
    graphs: list[list[str]] = []

    def backend(gm: Any, example_inputs: list) -> Any:
        graphs.append([node.name for node in gm.graph.nodes if node.op == "placeholder"])
        return compile_fx(gm, example_inputs, config_patches=options)

    function = traced_reference(reference, inputs)
    compiled = torch.compile(function, backend=backend, dynamic=False)
    sources, benchmarks = run_and_get_graph_code(compiled, inputs)
    wrappers = [s for s in sources if "def call(" in s]
    record: dict[str, Any] = {
        "workload": workload.name, "params": workload.params, "graphs": len(graphs),
        "placeholders": graphs[0] if graphs else [],
        "parameters": [("*" if p.kind is p.VAR_POSITIONAL else "") + name
                       for name, p in inspect.signature(function).parameters.items()],
        "inputs": [[list(x.shape), str(x.dtype).removeprefix("torch."), list(x.stride())]
                   if isinstance(x, torch.Tensor) else repr(x) for x in inputs],
        "sources": wrappers,
        "benchmark_modules": benchmarks,
    }
    # The configurations are read by running the graph's code on the reference's arguments. A graph
    # Dynamo resumed after a break (at .item(), say) takes values the reference computed in Python:
    # no seed (inductor_seed refuses it with the reason), and calling it on the arguments would fail
    # and lose the record that says why.
    positions = graph_argument_positions(record["placeholders"], record["parameters"])
    if len(graphs) == 1 and len(wrappers) == 1 and None not in positions:
        record["configs"] = _chosen_configs(wrappers[0], [inputs[p] for p in positions if p is not None])
    return record


def run_and_get_graph_code(compiled: Any, inputs: tuple) -> tuple[list[str], int]:
    """Run `compiled` once; the output code of the graph's own modules, and how many modules
    Inductor compiled only to time an autotuning choice.

    torch's `run_and_get_code` returns both kinds. Under max-autotune a choice that is a subgraph
    (a split-K GEMM, say) is compiled as a module of its own, named `benchmark_<choice>`, while the
    graph is being lowered: on the H100, KernelBench's matmul with a large K gave 11 modules for
    one graph, and the seed was refused. The graph's own module is the one to read."""
    import torch
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    own: list[str] = []
    benchmarks = 0

    def save_output_code(code: str) -> None:
        nonlocal benchmarks
        # V.graph: the lowering whose module this code is (a NullHandler, no name, outside any)
        if str(getattr(V.graph, "name", None) or "").startswith("benchmark_"):
            benchmarks += 1
        elif code not in own:
            own.append(code)

    with patch.object(GraphLowering, "save_output_code", save_output_code):
        torch._dynamo.reset()
        compiled(*inputs)
    return own, benchmarks


def traced_reference(reference: Any, inputs: tuple) -> Any:
    """What torch.compile is given for these inputs: the reference module's `traceable_for(*inputs)`
    where it has one (a KernelBench Model's forward with its state bound, one graph; the plain
    `reference` there builds Models and would split into many), else `reference` itself."""
    traceable = getattr(reference, "traceable_for", None)
    function = traceable(*inputs) if traceable is not None else None
    return function if function is not None else reference.reference


def capture_task(task_dir: str | Path, mode: str = "default", seed: int = 0) -> dict[str, Any]:
    import torch
    import triton

    task = load_task(task_dir)
    reference = _reference_module(task)
    out: dict[str, Any] = {"task": task.name, "mode": mode, "torch": torch.__version__, "triton": triton.__version__,
                           "device": torch.cuda.get_device_name(), "workloads": []}
    for device_kind, workloads in (("cuda", task.spec.workloads), ("cpu", task.spec.interpreter_workloads)):
        dtype = task.spec.dtype_for(device_kind)  # interpreter workloads: captured on the GPU at the CPU's dtype
        for workload in workloads:
            inputs = reference.make_inputs(workload.params, seed, "cuda", dtype)
            inputs = inputs if isinstance(inputs, tuple) else tuple(inputs)
            try:
                record = capture_workload(reference, workload, inputs, mode)
            except Exception as exc:  # noqa: BLE001 - one workload's failure is data, not the end of the capture
                record = {"workload": workload.name, "params": workload.params,
                          "error": f"{type(exc).__name__}: {exc}"[:2000], "trace": traceback.format_exc()[-4000:]}
            record["for"] = device_kind
            record["dtype"] = dtype
            out["workloads"].append(record)
            torch._dynamo.reset()
    return out


class CaptureError(RuntimeError):
    """The capture could not run (no GPU, Inductor crashed, timed out); the message says why."""


def capture_in_subprocess(task_dir: str | Path, mode: str = "default", timeout_s: float = 900.0) -> dict[str, Any]:
    """capture_task in a process of its own (a crash or hang in Inductor costs only the capture), on
    the first visible GPU, holding its device lease: max-autotune times kernels, and another
    process's evaluation on that GPU would disturb its choices as it would theirs."""
    import subprocess
    import tempfile

    import torch

    if not torch.cuda.is_available():
        raise CaptureError("an Inductor seed needs a CUDA GPU: Inductor writes Triton for CUDA devices only "
                           "(or pass a capture made on one, --seed-capture FILE)")
    with tempfile.TemporaryDirectory(prefix="accelopt-capture-") as tmp:
        out = Path(tmp) / "capture.json"
        try:
            with device_lease.hold(device_lease.default_gpu(), f"torch.compile capture ({mode})"):
                proc = subprocess.run([sys.executable, "-m", "accelopt.tools.inductor_capture", str(task_dir),
                                       str(out), "--mode", mode], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CaptureError(f"torch.compile of the reference took over {timeout_s:.0f} s") from None
        except device_lease.DeviceLeaseError as exc:
            raise CaptureError(str(exc)) from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CaptureError(f"the Inductor capture failed (exit {proc.returncode}): {tail[0][:300]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_dir")
    parser.add_argument("out")
    parser.add_argument("--mode", choices=MODES, default="default")
    args = parser.parse_args(argv)
    captured = capture_task(args.task_dir, args.mode)
    Path(args.out).write_text(json.dumps(captured, indent=1))
    failed = [w["workload"] for w in captured["workloads"] if "error" in w]
    print(f"{captured['task']}: {len(captured['workloads']) - len(failed)} workloads captured"
          + (f", failed: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
