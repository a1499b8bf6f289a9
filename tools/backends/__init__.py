"""Kernel backends behind one small protocol: is it usable here (and why not), and evaluate a
source against a task (compile, check correctness, time interleaved with comparators, profile).

- triton: tools/harness (GPU through CUDA, or the CPU interpreter).
- nki: tools/backends/nki.py (the NKI simulator for correctness; Trainium hardware for timing).
The graph calls `backend_for(task).evaluate(...)` and never needs to know which one it has.
"""

from __future__ import annotations

from collections.abc import Callable

# the protocol's own module, so that a backend module (nki.py), which this one imports when asked
# for it, does not import this package back
from accelopt.tools.backends.protocol import Availability, Backend
from accelopt.tools.harness.result import EvalResult
from accelopt.tools.task import Task


class TritonBackend:
    name = "triton"

    def __init__(self, profile: bool = False):
        self.profile = profile  # a verified kernel's profile for the planner (EvalResult.profile)

    def availability(self) -> Availability:
        try:
            import triton
        except ImportError as exc:
            return Availability(False, f"Triton unavailable: {exc}; `pip install triton`")
        from accelopt.tools.harness.runner import gpu_count

        gpus = gpu_count()
        where = f"{gpus} CUDA GPU(s)" if gpus else "no GPU: CPU interpreter (correctness only; its times are not GPU performance)"
        return Availability(True, f"triton {triton.__version__}, {where}")

    def refuse(self, task: Task, device: str) -> str | None:
        from accelopt.tools.harness import confine

        refusal = self.availability().refusal()
        if refusal is None and (reason := confine.refusal()):
            return confine.refusal_message(reason)
        return refusal

    def evaluate(self, task: Task, source: str, *, device: str | None, timeout_s: float,
                 compare: dict[str, str], trusted: bool, seed: int | None = None) -> EvalResult:
        from accelopt.tools.harness.runner import evaluate

        return evaluate(task, source, device=device, timeout_s=timeout_s, compare=compare, trusted=trusted,
                        profile=self.profile, seed=seed)


class RayTritonBackend(TritonBackend):
    """The Triton harness on a Ray cluster's evaluation actors (tools/harness/ray_pool.py): the
    same evaluation, run on a node of the cluster; its result records the node."""

    def __init__(self, address: str, profile: bool = True):
        self.address, self.profile = address, profile

    def evaluate(self, task: Task, source: str, *, device: str | None, timeout_s: float,
                 compare: dict[str, str], trusted: bool, seed: int | None = None,
                 on_node: Callable[[str], None] | None = None) -> EvalResult:
        """`on_node(node)`: called when the request is sent to a node's actor (again if it is re-queued)."""
        from accelopt.tools.harness.ray_pool import ClusterError, get_ray_pool

        try:
            pool = get_ray_pool(self.address, device)
        except ClusterError as exc:
            return EvalResult(status="infra_error", error=str(exc), device=device or "auto")
        return pool.evaluate(task, source, timeout_s=timeout_s, compare=compare, trusted=trusted, profile=self.profile,
                             on_node=on_node, seed=seed)


def backend_for(name_or_task: str | Task, cluster: str | None = None, profile: bool = False) -> Backend:
    """The task's backend; with `cluster` (a Ray address), Triton evaluations run on that Ray
    cluster. `profile`: a verified kernel is also profiled for the planner, on the GPU that
    judged it, while its judge is held. NKI always runs here."""
    name = name_or_task if isinstance(name_or_task, str) else name_or_task.spec.backend
    if name == "triton":
        return RayTritonBackend(cluster, profile) if cluster else TritonBackend(profile)
    if name == "nki":
        from accelopt.tools.backends.nki import NKIBackend

        return NKIBackend()
    raise ValueError(f"unknown kernel backend {name!r}: use triton or nki")


BACKENDS = ("triton", "nki")


def run_refusal(task: Task, device: str = "auto") -> str | None:
    """Why an optimization run of this task cannot happen on this machine, or None."""
    return backend_for(task).refuse(task, device)
