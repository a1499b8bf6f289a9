"""Reference for a task imported from KernelBench (copied verbatim into the task directory,
beside problem.py). Inputs are get_inputs() followed by the Model's parameters and buffers;
workload params override the problem's module-level constants (batch_size, dim, ...)."""

import importlib.util
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def load_problem(path):
    spec = importlib.util.spec_from_file_location(f"kernelbench_problem_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_problem = load_problem(HERE / "problem.py") if (HERE / "problem.py").is_file() else None


def _configure(workload):
    for key, value in workload.items():
        setattr(_problem, key, value)


def _cast(t, device, dtype):
    t = t.detach().to(device)
    return t.to(getattr(torch, dtype)) if t.is_floating_point() else t


def make_inputs(workload, seed, device, dtype):
    _configure(workload)
    torch.manual_seed(seed)  # KernelBench's get_inputs and Model init draw from the global generator
    model = _problem.Model(*_problem.get_init_inputs())
    inputs = [_cast(x, device, dtype) if isinstance(x, torch.Tensor) else x for x in _problem.get_inputs()]
    weights = [_cast(t, device, dtype) for t in [*model.parameters(), *model.buffers()]]
    return (*inputs, *weights)


def reference(*args):
    model = _problem.Model(*_problem.get_init_inputs())
    tensors = [*model.parameters(), *model.buffers()]
    inputs, weights = args[: len(args) - len(tensors)], args[len(args) - len(tensors):]
    with torch.no_grad():
        for slot, value in zip(tensors, weights):
            slot.data = value
        return model(*inputs)


def _meta_run(module, dtype):
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs()).to(getattr(torch, dtype))
        inputs = [x.to(getattr(torch, dtype)) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in module.get_inputs()]
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return model, inputs, outs, counter.get_total_flops()


def signature(module, dtype):
    model, inputs, outs, total = _meta_run(module, dtype)
    def fmt(t):
        return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" if isinstance(t, torch.Tensor) else repr(t)
    params = [f"{n} {fmt(p)}" for n, p in [*model.named_parameters(), *model.named_buffers()]]
    text = (f"run(*inputs, *parameters) must return what Model.forward returns. inputs: "
            f"{', '.join(fmt(x) for x in inputs) or 'none'}; parameters (Model's, in registration order): "
            f"{', '.join(params) or 'none'}; output: {', '.join(fmt(o) for o in outs)}.")
    return text, total > 0


def flops(workload, dtype):
    """Matmul/convolution FLOPs as torch's FlopCounterMode counts them (elementwise work is not
    counted: such problems are judged on the memory roof)."""
    _configure(workload)
    return float(_meta_run(_problem, dtype)[3])


def bytes_moved(workload, dtype):
    """Inputs, parameters and outputs, each once."""
    _configure(workload)
    model, inputs, outs, _ = _meta_run(_problem, dtype)
    tensors = [*inputs, *model.parameters(), *model.buffers(), *outs]
    return float(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)))
