"""Reference for a task imported from KernelBench (copied verbatim into the task directory, beside
problem.py and kernelbench_sizes.py).

Inputs are get_inputs() followed by the Model's state: its parameters and buffers in registration
order, then tensors it keeps as plain attributes (an RNN's hidden state). A workload's params
override the problem's sizes (kernelbench_sizes.py); sizes computed from them follow.

`reference` finds the sizes from the shapes it is handed, so the reference run as a kernel (a
from-scratch baseline, in a process of its own that never saw make_inputs) builds the same Model
as the judge. It never writes to its arguments: state the Model updates (BatchNorm's running
statistics) is updated on copies, and `reference_with_state` hands the updates back.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
FORWARD_SEED = 0  # a Model that draws random numbers in forward (an LSTM's h0) draws the same ones every call
REAL_RUN_ELEMENTS = 5_000_000  # where the meta device cannot run a Model, a real CPU run up to this size


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile looks a traced function's module up by name
    spec.loader.exec_module(module)
    return module


sizes = _load(HERE / "kernelbench_sizes.py", f"kernelbench_sizes_{abs(hash(str(HERE)))}")


def _key(values: dict) -> str:
    return json.dumps(values, sort_keys=True, default=str)


class Problem:
    """A KernelBench problem module that can be set to any sizes."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tree = ast.parse(self.path.read_text(), filename=str(self.path))
        self.module = _load(self.path, f"kernelbench_problem_{abs(hash(str(self.path)))}")
        self.workload: dict | None = None
        self.measured: dict[tuple[str, str, bool], dict] = {}  # measure()'s results, by sizes, dtype, quick

    def configure(self, workload: dict) -> dict:
        """Set the module's sizes for `workload` (overrides); returns every size."""
        values = sizes.evaluate(self.tree, workload)
        for name, value in values.items():
            setattr(self.module, name, value)
        self.workload = dict(workload)
        return values

    def build(self, seed: int, device: str | None = None) -> torch.nn.Module:
        torch.manual_seed(seed)
        with torch.device(device) if device else contextlib.nullcontext():
            return self.module.Model(*self.module.get_init_inputs())

    def inputs(self, device: str | None = None) -> list:
        with torch.device(device) if device else contextlib.nullcontext():
            return list(self.module.get_inputs())

    def make_inputs(self, workload: dict, seed: int, device, dtype: str) -> tuple:
        """get_inputs() then the Model's state, from KernelBench's seeded construction: weights are data.
        get_inputs() runs on `device` (its factories' default), seeded like the rest: a level-1 input
        of 1.6e9 values drawn on the CPU took seconds, and the judge draws fresh inputs for every
        checked and timed call."""
        self.configure(workload)
        model = self.build(seed)
        inputs = [_cast(x, device, dtype) if isinstance(x, torch.Tensor) else x for x in self.inputs(device)]
        return (*inputs, *[_cast(t, device, dtype) for t in state_tensors(model)])

    def meta_model(self) -> torch.nn.Module:
        """The Model with its tensors on the meta device; built for real where __init__ needs
        values (`.item()`), then moved."""
        try:
            return self.build(0, "meta")
        except Exception:  # noqa: BLE001 - __init__ reads tensor values: build it for real
            return self.build(0).to("meta")


def state_slots(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str, str]]:
    """(kind, module, attribute, qualified name) of each tensor of the Model's state, in the order
    the kernel receives them: Module.parameters(), Module.buffers(), then plain tensor attributes."""
    slots = []
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for qualified, _ in named:
            owner, _, attr = qualified.rpartition(".")
            slots.append((kind, model.get_submodule(owner), attr, qualified))
    for owner, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                slots.append(("attribute", module, attr, f"{owner}.{attr}" if owner else attr))
    return slots


def state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [getattr(module, attr) for _, module, attr, _ in state_slots(model)]


def _cast(t, device, dtype):
    t = t.detach().to(device)
    return t.to(getattr(torch, dtype)) if t.is_floating_point() else t


def _element_count(values) -> int:
    return sum(t.numel() for t in values if isinstance(t, torch.Tensor))


@contextlib.contextmanager
def seeded_forward(args):
    """Random numbers drawn inside forward are the same on every call, without touching the
    caller's generators."""
    cuda = sorted({a.device.index or 0 for a in args if isinstance(a, torch.Tensor) and a.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(FORWARD_SEED)
        yield


def _shapes(args) -> tuple:
    return tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args)


class Runner:
    """A problem's Model per size configuration, run on state handed in as arguments."""

    def __init__(self, problem: Problem, workloads: list[dict]):
        self.problem = problem
        self.workloads = workloads
        self._signatures: dict[str, tuple] = {}
        self._models: dict[str, tuple[torch.nn.Module, list]] = {}

    def _signature(self, workload: dict) -> tuple[str, tuple]:
        values = self.problem.configure(workload)
        key = _key(values)
        if key not in self._signatures:
            model = self.problem.meta_model()
            self._signatures[key] = _shapes([*self.problem.inputs("meta"), *state_tensors(model)])
        return key, self._signatures[key]

    def workload_for(self, args) -> dict:
        """The workload whose inputs have these shapes: the one last configured (the judge's
        make_inputs), else the task's own, else the problem's defaults."""
        wanted = _shapes(args)
        current = [self.problem.workload] if self.problem.workload is not None else []
        for workload in [*current, *self.workloads, {}]:
            if self._signature(workload)[1] == wanted:
                return workload
        raise ValueError(f"reference: inputs of shapes {list(wanted)} match no workload of this task")

    def model(self, workload: dict) -> tuple[torch.nn.Module, list]:
        key = _key(self.problem.configure(workload))
        if key not in self._models:
            try:  # the arguments replace every tensor: skip the random initialisation
                model = self.problem.build(0, "meta").to_empty(device="cpu")
            except Exception:  # noqa: BLE001 - __init__ needs real values
                model = self.problem.build(0)
            self._models[key] = (model, state_slots(model))
        return self._models[key]

    def run(self, args, workload: dict | None = None):
        """(outputs, {argument index: state the Model updated}); the arguments stay untouched."""
        workload = self.workload_for(args) if workload is None else workload
        model, slots = self.model(workload)
        first = len(args) - len(slots)
        inputs, state = args[:first], args[first:]
        for (kind, module, attr, _), value in zip(slots, state):
            if kind == "parameter":
                getattr(module, attr).data = value
            elif kind == "buffer":
                getattr(module, attr).data = value.clone()  # updated in place by the Model (running stats)
            else:
                setattr(module, attr, value.clone())
        with torch.no_grad(), seeded_forward(args):
            out = model(*inputs)
        updated = {}
        for i, ((kind, module, attr, _), before) in enumerate(zip(slots, state)):
            after = getattr(module, attr, None)
            if kind != "parameter" and isinstance(after, torch.Tensor) and after.shape == before.shape \
                    and not torch.equal(after.to(before.device, before.dtype), before):
                updated[first + i] = after.detach()  # the next call swaps the buffer's data: keep this one
        return out, updated


def _task_workloads(kinds: tuple[str, ...] = ("interpreter_workloads", "workloads")) -> list[dict]:
    path = HERE / "task.json"
    if not path.is_file():
        return []
    spec = json.loads(path.read_text())
    return [w["params"] for kind in kinds for w in spec.get(kind, [])]


_problem = Problem(HERE / "problem.py") if (HERE / "problem.py").is_file() else None
_runner: Runner | None = None


def _the_runner() -> Runner:
    global _runner
    if _runner is None:
        assert _problem is not None  # an imported task's reference.py comes with its problem.py
        _runner = Runner(_problem, _task_workloads())
    return _runner


def make_inputs(workload, seed, device, dtype):
    return _problem.make_inputs(workload, seed, device, dtype)


def reference(*args):
    return _the_runner().run(args)[0]


def reference_with_state(*args):
    """The outputs, and {argument index: its value after the call} for the state the Model
    updates (BatchNorm's running statistics in training mode), as the Model would leave it."""
    return _the_runner().run(args)


_traceable: dict[tuple, object] = {}


def traceable_for(*args):
    """The Model's forward for these arguments' shapes as a function of the same arguments, that
    torch.compile traces to one graph (the torch.compile comparator and Inductor seeds use it):
    the Model is found outside the traced function and its parameters and buffers are bound
    through functional_call, as compiling the Model itself would see them. None where that would
    change what the Model computes: state in plain attributes, random numbers drawn in forward,
    or a Model that updates its buffers (BatchNorm in training mode)."""
    shapes = _shapes(args)
    if shapes not in _traceable:
        _traceable[shapes] = _make_traceable(args)
    return _traceable[shapes]


def _make_traceable(args):
    runner = _the_runner()
    model, slots = runner.model(runner.workload_for(args))
    modules = list(model.modules())
    if any(kind == "attribute" for kind, *_ in slots):
        return None
    if any(m.training for m in modules if isinstance(m, torch.nn.modules.batchnorm._NormBase)):
        return None
    if any(m.p > 0 for m in modules if isinstance(m, torch.nn.modules.dropout._DropoutNd)):
        return None
    forwards = "".join(inspect.getsource(type(m).forward) for m in modules if type(m).__module__ == type(model).__module__)
    if "rand" in forwards:  # rand, randn, randint, rand_like... in forward: the seeded draw is not traced
        return None
    first = len(args) - len(slots)
    names = [qualified for *_, qualified in slots]

    def forward(*args):
        with torch.no_grad():
            return torch.func.functional_call(model, dict(zip(names, args[first:])), tuple(args[:first]))

    return forward


# ---------------------------------------------------------------- KernelBench solutions (ModelNew)

SOLUTION_SEED = 42  # KernelBench's seed_num: set before get_init_inputs(), before Model(...), before ModelNew(...)


def model_new_entry(model_new: type) -> ModelNewEntry:
    """The task's entry point for a KernelBench solution module, whose `ModelNew` is the kernel
    (accelopt's tools/kernelbench_solution.py appends the call to such a module)."""
    return ModelNewEntry(model_new)


class ModelNewEntry:
    """`run(*inputs, *state)` for a KernelBench solution: ModelNew built as KernelBench builds it,
    its forward called on the inputs.

    Weights. KernelBench seeds, builds Model(*get_init_inputs()), seeds again and builds ModelNew
    from the same init inputs: ModelNew has the Model's weights where its __init__ draws them as
    the Model's does, and its own where it does not. The judge hands every check the state of a
    Model built under that check's seed, which a ModelNew built once cannot hold. So both are built
    here under KernelBench's seed, once per size configuration, and each tensor of ModelNew equal
    to one of the Model's (shape, dtype, values) is that weight: in every call it is the one the
    call receives. The rest (ModelNew's own constants, or weights drawn otherwise) stays as built,
    and a ModelNew whose weights are not the Model's computes other outputs, as in KernelBench. A
    tensor ModelNew derives from its weights in __init__ (a transposed copy) keeps its built
    values too: derived in forward, it follows them.

    Construction is not the kernel's work: the workloads of this process's device are built when
    the module is imported, outside every traced call; a call moves ModelNew to its inputs' device
    and dtype once (data movement), and swaps the call's tensors in (no op) for its forward."""

    def __init__(self, model_new: type):
        self.model_new = model_new
        module = sys.modules.get(getattr(model_new, "__module__", ""))
        # sizes the solution module defines itself (a copy of the problem's) follow the workload, as the problem's do
        self.namespace = vars(module) if module is not None else {}
        self.runner = _the_runner()
        self.built: dict[tuple, dict] = {}  # input and state shapes -> ModelNew and what ties it to the Model
        for workload in _task_workloads(("workloads",) if torch.cuda.is_available() else ("interpreter_workloads",)):
            self._entry(workload)

    def _entry(self, workload: dict) -> dict:
        shapes = self.runner._signature(workload)[1]
        if shapes not in self.built:
            model, ties, state, sizes = self._construct(workload)
            self.built[shapes] = {"workload": workload, "model": model, "ties": ties, "state": state, "sizes": sizes,
                                  "placed": {}}
        return self.built[shapes]

    def _construct(self, workload: dict) -> tuple:
        """ModelNew on the CPU, with (kind, owner, attribute, state index) of its tensors that are
        the Model's, the Model's state count, and the sizes the solution module defines."""
        problem = self.runner.problem
        sizes = {k: v for k, v in problem.configure(workload).items()
                 if isinstance(self.namespace.get(k), (int, float, tuple, list))}
        self.namespace.update(sizes)
        torch.manual_seed(SOLUTION_SEED)
        init = list(problem.module.get_init_inputs())
        with torch.no_grad():
            torch.manual_seed(SOLUTION_SEED)
            model = problem.module.Model(*init)
            torch.manual_seed(SOLUTION_SEED)
            new = self.model_new(*init)
        slots = state_slots(model)
        return new, _ties(slots, new), len(slots), sizes

    def _placed(self, entry: dict, device, dtype) -> tuple:
        """ModelNew on `device`, its floating tensors in `dtype` (KernelBench's .to(device, dtype)),
        moved tensor by tensor: Module.to swaps parameter data through an op the judge's trace counts."""
        key = (device, dtype)
        if key not in entry["placed"]:
            model = entry.pop("model", None)
            if model is None:  # already placed elsewhere (another device or dtype): built again
                model = self._construct(entry["workload"])[0]
            for module in model.modules():
                for store in (module._parameters, module._buffers):
                    for name, t in store.items():
                        if t is not None:
                            moved = _moved(t, device, dtype)
                            store[name] = (torch.nn.Parameter(moved, t.requires_grad)
                                           if isinstance(t, torch.nn.Parameter) else moved)
                for name, value in list(vars(module).items()):
                    if isinstance(value, torch.Tensor):
                        vars(module)[name] = _moved(value, device, dtype)
            targets = []
            for kind, owner, attr, index in entry["ties"]:
                module = model.get_submodule(owner)
                store = {"parameter": module._parameters, "buffer": module._buffers}.get(kind, vars(module))
                targets.append((store, attr, index, kind != "parameter"))
            entry["placed"][key] = (model, targets)
        return entry["placed"][key]

    def __call__(self, *args):
        entry = self.built.get(_shapes(args))
        if entry is None:  # sizes of no workload built at import: built now, inside the call
            entry = self._entry(self.runner.workload_for(args))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        dtype = next((t.dtype for t in tensors if t.is_floating_point()), None)
        model, targets = self._placed(entry, device, dtype)
        self.namespace.update(entry["sizes"])
        first = len(args) - entry["state"]
        kept = []
        try:  # the call's weights; buffers and attributes on copies (a Model may update them), as the reference
            for store, name, index, copies in targets:
                kept.append((store, name, store[name]))
                store[name] = args[first + index].clone() if copies else args[first + index]
            with torch.no_grad(), seeded_forward(args):
                return model(*args[:first])
        finally:  # nothing of the call's arguments stays referenced
            for store, name, value in reversed(kept):
                store[name] = value


def _ties(slots: list, new: torch.nn.Module) -> list[tuple[str, str, str, int]]:
    """(kind, owner, attribute, index in the Model's state) of each tensor of `new` that is a tensor
    of the Model's state: the same shape, dtype and values under the same seed. Where several are
    equal (constants: zero biases, running statistics), the one of the same name, else the first
    not yet taken."""
    values = [getattr(module, attr) for _, module, attr, _ in slots]
    ties, taken = [], set()
    for kind, module, attr, name in state_slots(new):
        mine = getattr(module, attr)
        same = [i for i, v in enumerate(values) if v.shape == mine.shape and v.dtype == mine.dtype
                and v.device == mine.device and torch.equal(v, mine)]
        if same:
            index = ([i for i in same if slots[i][3] == name] or [i for i in same if i not in taken] or same)[0]
            taken.add(index)
            ties.append((kind, name.rpartition(".")[0], attr, index))
    return ties


def _moved(t: torch.Tensor, device, dtype) -> torch.Tensor:
    t = t.detach().to(device)
    return t.to(dtype) if dtype is not None and t.is_floating_point() else t


# ---------------------------------------------------------------- costs


def measure(problem: Problem, workload: dict, dtype: str, quick: bool = False) -> dict:
    """Shapes and costs of one configuration, on the meta device where the Model runs there,
    else on a small real CPU run; `flops` and `outputs` are None where neither could run.
    `quick`: an RNN small enough runs for real, far faster than the meta device unrolling it step
    by step, though torch's FLOP counter does not see the fused RNN ops of a real run."""
    key = (_key(problem.configure(workload)), dtype, quick)
    if key not in problem.measured:
        problem.measured[key] = _measure(problem, dtype, quick)
    return problem.measured[key]


def _measure(problem: Problem, dtype: str, quick: bool) -> dict:
    torch_dtype = getattr(torch, dtype)
    model = problem.meta_model().to(torch_dtype)
    inputs = [x.to(torch_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in problem.inputs("meta")]
    state = state_tensors(model)
    result: dict[str, Any] = {"model": model, "inputs": inputs, "state": state, "outputs": None, "flops": None,
                              "error": None,
              "elements": _element_count([*inputs, *state])}
    small = result["elements"] <= REAL_RUN_ELEMENTS
    rnn = any(isinstance(m, torch.nn.RNNBase) for m in model.modules())
    if not (quick and rnn and small):
        try:
            result["outputs"], result["flops"] = _count(model, inputs)
        except Exception as e:  # noqa: BLE001 - a Model that reads values (`.item()`) cannot run on meta
            result["error"] = f"{type(e).__name__}: {e}"
    if result["outputs"] is None and small:
        model = problem.build(0).to(torch_dtype)
        real = [x.to(torch_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in problem.inputs()]
        with seeded_forward([]):
            result["outputs"], result["flops"] = _count(model, real)
    return result


def run_once(problem: Problem, workload: dict) -> list:
    """Build the Model and run forward once on CPU at these sizes."""
    problem.configure(workload)
    model = problem.build(0)
    inputs = problem.inputs()
    with torch.no_grad(), seeded_forward(inputs):
        out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _count(model, inputs) -> tuple[list, int]:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out], counter.get_total_flops()


_costs: dict[tuple[str, str], tuple[float, float]] = {}


def _flops_and_bytes(workload, dtype) -> tuple[float, float]:
    key = (_key(workload), dtype)
    if key not in _costs:
        assert _problem is not None  # an imported task's reference.py comes with its problem.py
        m = measure(_problem, workload, dtype)
        tensors = [*m["inputs"], *m["state"], *(m["outputs"] or [])]
        moved = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
        _costs[key] = (float(m["flops"] or 0), float(moved))
    return _costs[key]


def flops(workload, dtype):
    """Matmul/convolution FLOPs as torch's FlopCounterMode counts them (elementwise work is not
    counted: such problems are judged on the memory roof); 0 where the Model could not be run."""
    return _flops_and_bytes(workload, dtype)[0]


def bytes_moved(workload, dtype):
    """Inputs, the Model's state and the outputs, each once."""
    return _flops_and_bytes(workload, dtype)[1]
