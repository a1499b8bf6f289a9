"""The compile-ahead process: a candidate's Triton kernels compiled for a GPU this process cannot
touch, into the Triton cache its sandboxes will be seeded from (compile_ahead.py starts it).

Started as `python ahead_worker.py REQUEST.json FD`, one process per candidate, never reused:
under bubblewrap with no GPU device node in its /dev (confine.bwrap_prefix gpu=False), with
CUDA_VISIBLE_DEVICES="" and the judge's scrubbed environment, and Landlocked here, before any
thread exists, to writing beneath its own folder. It imports nothing of accelopt: confine.py is
loaded by path. Nothing it reports is trusted: events go to FD as JSON lines (the harness reads
what the cache holds for itself); outputs are garbage and never looked at.

How a launch is predicted without a GPU:
- Triton's driver is a stand-in that reports the GPU's target (GPUTarget("cuda", capability,
  32)), device 0 and stream 0. Triton's file cache key depends on the source, the signature, the
  specialization (pointer 16-byte alignment, integers' ==1 and %16), constexprs, the backend's
  hash (ptxas version + arch), options and cache-invalidating variables: not on the GPU itself.
- Every JITFunction.run is a warmup (compile, no launch); an Autotuner compiles every pruned
  configuration at once in a small thread pool (Triton's AsyncCompileMode, as the sandbox does
  before its first benchmark: sandbox.py `_compile_together`) and calls none; heuristics
  wrappers pass through.
- The task's inputs are made on the CPU (values matter: FlashInfer-Bench wrappers read
  kv_indptr[-1].item() to size their launches), and the candidate sees "cuda" everywhere: a
  torch function mode reports every tensor as on cuda:0 and maps every device="cuda" (and
  .cuda(), .to("cuda")) to the CPU; torch.cuda's Python API answers as the GPU would (is_available,
  capability, properties, streams and events that do nothing). CPU allocations are 64-byte
  aligned and the GPU's 256 or more, so data_ptr() % 16 depends on view offsets alone, as there.
  A workload whose inputs exceed the byte bound runs on the meta device instead (no memory, no
  values: a wrapper that reads a value then fails, and says so).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from types import FrameType

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # a file of the candidate's folder must not shadow a sibling, nor a sibling a module

HERE = os.path.dirname(os.path.abspath(__file__))
ERROR_CHARS = 600  # an event line stays below PIPE_BUF: written whole even from several threads


def _load(name: str, filename: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Events:
    """JSON lines on the report descriptor; one os.write each (atomic below PIPE_BUF)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def say(self, event: str, **fields) -> None:
        line = json.dumps({"event": event, **fields}, default=str)
        if len(line) > 3500:
            line = json.dumps({"event": event, "truncated": True, **{k: str(v)[:200] for k, v in fields.items()}})
        with self.lock:
            try:
                os.write(self.fd, line.encode() + b"\n")
            except OSError:
                pass


def where(exc: BaseException, candidate_path: str) -> str:
    """`Type: message (file:line in function)`, at the candidate's innermost frame if it has
    one (where its code met the stand-in), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if os.path.abspath(f.filename) == candidate_path]
    frame = (own or frames)[-1] if (own or frames) else None
    at = f" ({os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})" if frame else ""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:ERROR_CHARS]}{at}"


# ---------------------------------------------------------------- the stand-ins

class Counter:
    """How often the candidate's own code (not torch's, not Triton's) used each stand-in."""

    def __init__(self, path: str):
        self.path = path
        self.counts: dict[str, int] = {}

    def __call__(self, what: str) -> None:
        frame: FrameType | None = sys._getframe(1)
        for _ in range(4):  # the stand-in, its wrapper, the torch function mode, then the caller
            if frame is None:
                return
            if frame.f_code.co_filename == self.path:
                self.counts[what] = self.counts.get(what, 0) + 1
                return
            frame = frame.f_back


def _refuse(what: str):
    """A driver call that needs the GPU: it raises, naming what was asked of it."""
    def call(*args, **kwargs):
        raise RuntimeError(f"{what}: the compile-ahead process has no GPU")
    return call


def _stand_in_utils(capability: tuple[int, int], properties: dict, used: Counter):
    """The driver's `utils`: device 0's properties and capability, stream 0; loading a cubin,
    launching and TMA descriptors refused (nothing here may touch a GPU)."""

    class Utils:
        def get_device_properties(self, device=0):
            used("triton driver device properties")
            return dict(properties)

        def get_device_capability(self, device=0):
            return capability

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_default_stream(self, device=0):
            return 0

        def is_stream_capturing(self, stream=0):
            return False

        def set_printf_fifo_size(self, size):
            pass

        load_binary = staticmethod(_refuse("loading a cubin"))
        launch = staticmethod(_refuse("launching a kernel"))
        unload_module = staticmethod(lambda *a, **k: None)
        cuOccupancyMaxActiveClusters = staticmethod(_refuse("cuOccupancyMaxActiveClusters"))
        fill_tma_descriptor_tiled = staticmethod(_refuse("filling a TMA descriptor"))
        fill_tma_descriptor_im2col = staticmethod(_refuse("filling a TMA descriptor"))

    return Utils()


def _bench_once(used: Counter):
    """triton.testing's benchmarks, and the driver's benchmarker, as one call that compiles."""

    def bench_once(fn, *args, quantiles=None, return_mode="mean", **kwargs):
        """A benchmark compiles (one call, every launch a warmup) and times nothing."""
        used("benchmark (triton.testing.do_bench)")
        fn()
        return [1.0] * len(quantiles) if quantiles else 1.0

    return bench_once


def _stand_in_driver(torch, target, capability: tuple[int, int], utils, bench_once, ty_to_cpp):
    """The driver object Triton asks: the GPU's target, device 0, stream 0, torch.cuda as its
    device interface, `bench_once` as its benchmarker; building a launcher refused."""

    class StandInDriver:
        launcher_cls = staticmethod(_refuse("building a launcher"))

        def __init__(self):
            self.utils = utils

        @classmethod
        def is_active(cls):
            return True

        def map_python_to_cpp_type(self, ty):
            return ty_to_cpp(ty)

        def get_current_target(self):
            return target

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_current_stream(self, device=None):
            return 0

        def get_device_capability(self, device=0):
            return capability

        def get_active_torch_device(self):
            return torch.device("cuda", 0)

        def get_device_interface(self):
            return torch.cuda

        def get_benchmarker(self):
            return bench_once

        def get_empty_cache_for_benchmark(self):
            return torch.empty(1, dtype=torch.int)

        def clear_cache(self, cache):
            pass

    return StandInDriver()


def install_driver(triton, torch, target, props: dict, used: Counter) -> None:
    """Triton's active driver: the GPU's target, device 0, stream 0; no launch, no benchmark.
    A plain class (Tritons differ in DriverBase's abstract methods): what JITFunction.run, the
    autotuner, compile and triton.testing ask of a driver."""
    try:
        from triton.backends.nvidia.driver import ty_to_cpp
    except ImportError:  # an older layout: not needed to compile
        ty_to_cpp = str
    capability = (target.arch // 10, target.arch % 10)
    properties = {"max_shared_mem": props["max_shared_mem"], "max_num_regs": 65536,
                  "multiprocessor_count": props.get("multiprocessor_count") or 0, "warpSize": 32,
                  "sm_clock_rate": 1_980_000, "mem_clock_rate": 2_619_000, "mem_bus_width": 5120}
    bench_once = _bench_once(used)
    utils = _stand_in_utils(capability, properties, used)
    triton.runtime.driver.set_active(_stand_in_driver(torch, target, capability, utils, bench_once, ty_to_cpp))
    testing = importlib.import_module("triton.testing")
    for name in ("do_bench", "do_bench_cudagraph"):
        if hasattr(testing, name):
            setattr(testing, name, bench_once)


def _stand_in_properties(props: dict, capability: tuple[int, ...]):
    """torch.cuda.get_device_properties' answer: the GPU's name, capability, SMs, memory and L2."""

    class Properties:
        name = props["name"]
        major, minor = capability
        multi_processor_count = props.get("multiprocessor_count") or 0
        total_memory = props["total_memory"]
        L2_cache_size = props.get("l2_cache_size", 50 * 2**20)
        warp_size = 32
        max_threads_per_multi_processor = 2048
        regs_per_multiprocessor = 65536
        shared_memory_per_block_optin = props["max_shared_mem"]
        is_integrated = False
        uuid = "GPU-00000000-0000-0000-0000-000000000000"

        def __repr__(self):
            return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, " \
                   f"multi_processor_count={self.multi_processor_count}) [stand-in]"

    return Properties


def _stand_in_streams(torch, used: Counter):
    """torch.cuda's Stream, Event and CUDAGraph: constructed (and counted), doing nothing."""

    class Stream:
        cuda_stream = 0
        device = torch.device("cuda", 0)

        def __init__(self, *args, **kwargs):
            used("torch.cuda.Stream")

        def synchronize(self):
            pass

        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            pass

        def record_event(self, event=None):
            return event or Event()

        def query(self):
            return True

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Event:
        def __init__(self, *args, **kwargs):
            used("torch.cuda.Event")

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

        def wait(self, stream=None):
            pass

        def query(self):
            return True

        def elapsed_time(self, other):
            return 1.0

    class Graph:
        def __init__(self, *args, **kwargs):
            used("torch.cuda.CUDAGraph")

        def replay(self):
            pass

        def reset(self):
            pass

        def capture_begin(self, *args, **kwargs):
            pass

        def capture_end(self):
            pass

    return Stream, Event, Graph


class Context:
    """torch.cuda.stream(), torch.cuda.device() and torch.cuda.graph(): a context that does nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _cuda_functions(props: dict, capability: tuple[int, ...], Properties, Stream) -> dict:
    """torch.cuda's functions as one GPU would answer them, with all its memory free."""
    return {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "set_device": lambda device=None: None, "synchronize": lambda device=None: None,
        "is_initialized": lambda: True, "init": lambda: None,
        "get_device_capability": lambda device=None: capability, "get_device_name": lambda device=None: props["name"],
        "get_device_properties": lambda device=None: Properties(), "current_stream": lambda device=None: Stream(),
        "default_stream": lambda device=None: Stream(), "set_stream": lambda stream=None: None,
        "stream": lambda stream=None: Context(), "device": Context, "graph": Context,
        "empty_cache": lambda: None, "mem_get_info": lambda device=None: (props["total_memory"], props["total_memory"]),
        "memory_allocated": lambda device=None: 0, "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0, "reset_peak_memory_stats": lambda device=None: None,
        "manual_seed": lambda seed: None, "manual_seed_all": lambda seed: None, "seed": lambda: None,
        "get_arch_list": lambda: [f"sm_{capability[0]}{capability[1]}"],
        "is_bf16_supported": lambda *a, **k: capability >= (8, 0),
    }


def stub_torch_cuda(torch, props: dict, used: Counter) -> None:
    """torch.cuda's Python API as the GPU would answer it, doing nothing (CPU torch has no CUDA)."""
    cuda = torch.cuda
    capability = tuple(props["capability"])
    Properties = _stand_in_properties(props, capability)
    Stream, Event, Graph = _stand_in_streams(torch, used)

    def counted(name, fn):
        def call(*args, **kwargs):
            used(f"torch.cuda.{name}")
            return fn(*args, **kwargs)
        return call

    for name, fn in _cuda_functions(props, capability, Properties, Stream).items():
        setattr(cuda, name, counted(name, fn))
    cuda._lazy_init = lambda: None
    for name, cls in (("Stream", Stream), ("Event", Event), ("CUDAGraph", Graph), ("ExternalStream", Stream)):
        setattr(cuda, name, cls)


def as_cuda_mode(torch, backing: str, used: Counter):
    """A torch function mode under which the candidate's tensors (on `backing`: cpu, or meta for
    inputs too big) say they are on cuda:0, and "cuda" anywhere a device is named means `backing`."""
    from torch.overrides import TorchFunctionMode

    Tensor = torch.Tensor
    device_get = Tensor.device.__get__
    is_cuda_get = Tensor.is_cuda.__get__
    same_tensor = {Tensor.cuda: "Tensor.cuda", Tensor.cpu: "Tensor.cpu", Tensor.pin_memory: "Tensor.pin_memory"}
    cuda_device = torch.device("cuda", 0)

    def gpu_named(value) -> bool:
        if isinstance(value, torch.device):
            return value.type == "cuda"
        return isinstance(value, str) and (value == "cuda" or value.startswith("cuda:"))

    class AsCuda(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func == device_get:
                used("Tensor.device")
                return cuda_device
            if func == is_cuda_get:
                used("Tensor.is_cuda")
                return True
            if func in same_tensor:
                used(same_tensor[func])
                return args[0]
            if func == Tensor.get_device:
                return 0
            if "device" in kwargs and (gpu_named(kwargs["device"]) or isinstance(kwargs["device"], int)):
                used('device="cuda"')
                kwargs["device"] = backing
            if func == Tensor.to and len(args) > 1 and (gpu_named(args[1]) or type(args[1]) is int):
                used('Tensor.to("cuda")')
                args = (args[0], backing, *args[2:])
            elif any(isinstance(a, torch.device) and a.type == "cuda" for a in args):
                args = tuple(torch.device(backing) if isinstance(a, torch.device) and a.type == "cuda" else a
                             for a in args)
            return func(*args, **kwargs)

    return AsCuda()


# ---------------------------------------------------------------- compile, never launch

def _count_compile_failures(triton, compiler, events: Events, state: dict, lock: threading.Lock) -> None:
    """Triton's compile (JITFunction's binder takes it from triton.compiler), its failures
    counted: an autotuner's configuration that does not compile is out, on the GPU too."""
    original_compile = compiler.compile

    def compile_counted(src, *args, **kwargs):
        try:
            return original_compile(src, *args, **kwargs)
        except Exception as exc:
            with lock:
                state["failures"] += 1
            events.say("compile_failed", kernel=getattr(src, "name", "?"), error=where(exc, ""))
            raise

    compiler.compile = compile_counted
    triton.compile = compile_counted


def _warmup_every_launch(JITFunction, state: dict) -> None:
    """JITFunction.run compiles and launches nothing (a warmup), counting the launches asked for."""
    original_run = JITFunction.run

    def run(self, *args, grid=None, warmup=False, **kwargs):
        name = getattr(self, "__name__", "?")
        state["launched"][name] = state["launched"].get(name, 0) + 1
        return original_run(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = run


def _compile_every_config(Autotuner, AsyncCompileMode, events: Events, state: dict, lock: threading.Lock,
                          threads: int) -> None:
    """Autotuner.run compiles every pruned configuration at once (in a pool of `threads`, where
    this Triton has AsyncCompileMode) and runs none; the first stands as its choice."""
    from concurrent.futures import ThreadPoolExecutor

    def tune(self, *args, **kwargs):
        key_args = {k: v for k, v in {**dict(zip(self.arg_names, args)), **kwargs}.items() if k in self.arg_names}
        key = tuple([key_args[k] for k in self.keys if k in key_args]
                    + [str(v.dtype) for v in key_args.values() if hasattr(v, "dtype")])
        if key in self.cache:  # tuned already: the GPU would launch the chosen config, compiled then
            return None
        plain = {k: v for k, v in kwargs.items() if k != "warmup"}
        self.nargs = dict(zip(self.arg_names, args))
        configs = self.prune_configs(plain)
        with lock:
            before = state["failures"]
        name = getattr(getattr(self, "base_fn", None), "__name__", "?")
        try:
            if AsyncCompileMode is not None and len(configs) > 1:
                with ThreadPoolExecutor(threads) as pool, AsyncCompileMode(pool, ignore_errors=True):
                    self.warmup(*args, **plain)
            else:
                for config in configs:
                    try:
                        self.fn.run(*args, **plain, **config.all_kwargs(), warmup=True)
                    except Exception:  # noqa: BLE001 - as the autotuner would: that config is out (counted)
                        pass
        finally:
            self.nargs = None
        with lock:
            failed = state["failures"] - before
        state["configs"] += len(configs)
        state["failed_configs"] += failed
        events.say("autotuned", kernel=name, configs=len(configs), failed=failed, key=str(key)[:200])
        chosen = configs[0]  # which one the GPU picks is its timing's business: each is compiled
        self.cache[key] = chosen
        self.best_config = chosen
        return None

    Autotuner.run = tune


def compile_only(triton, events: Events, threads: int) -> dict:
    """Every launch a warmup; an autotuner compiles all its pruned configurations and runs none."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # an older Triton: the configurations compile one after another
        AsyncCompileMode = None
    import triton.compiler as compiler

    state = {"launched": {}, "configs": 0, "failed_configs": 0, "failures": 0}
    lock = threading.Lock()
    _count_compile_failures(triton, compiler, events, state, lock)
    _warmup_every_launch(JITFunction, state)
    _compile_every_config(Autotuner, AsyncCompileMode, events, state, lock, threads)

    def listener(*, src, metadata, metadata_group, times, cache_hit, **_):
        name = getattr(src, "name", "?")
        total = getattr(times, "total", 0) or 0
        events.say("compiled", kernel=name, hit=bool(cache_hit), us=int(total))

    triton.knobs.compilation.listener = listener
    return state


def prebuild_utils(events: Events) -> None:
    """Triton's CUDA utilities (a C module gcc builds the first time a process's CUDA driver
    starts, kept in the Triton cache): built here by Triton's own constructor, as the sandbox's
    driver will look it up, where libcuda can be found (a GPU host's library file, not its device:
    loading it opens no device, only cuInit would). The sandbox then finds it in its cache."""
    try:
        from triton.backends.nvidia.driver import CudaUtils

        started = time.monotonic()
        CudaUtils()
        events.say("utils", built=True, s=round(time.monotonic() - started, 3))
    except BaseException as exc:  # noqa: BLE001 - no libcuda here
        events.say("utils", built=False, error=where(exc, ""))


# ---------------------------------------------------------------- the pass

def input_bytes(torch, make, *args) -> int | None:
    """What make_inputs would allocate, from a run under fake tensors (None: it cannot say)."""
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode

    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)  # its failures are expected
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            inputs = make(*args)
        return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    except Exception:  # noqa: BLE001 - safetensors, data-dependent draws: made for real
        return None


def meta_inputs(torch, make, *args):
    """make_inputs' shapes, dtypes and strides on the meta device (no memory, no values)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = make(*args)
    return tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                 if isinstance(t, torch.Tensor) else t for t in fake)


def main() -> None:
    with open(sys.argv[1]) as f:
        request = json.load(f)
    events = Events(int(sys.argv[2]))
    started = time.monotonic()
    gpu_nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))  # Landlock hides /dev's list
    if request["confine"]:
        confine = _load("accelopt_ahead_confine", "confine.py")
        confine.restrict([request["home"]], request["readable"], gpu=False, shm=False)
    events.say("start", confined=bool(request["confine"]), gpu_nodes=gpu_nodes)
    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    torch.set_num_threads(1)  # the wrapper's host work must not take the cores the timed GPU's host needs
    props = request["properties"]
    major, minor = props["capability"]
    target = GPUTarget("cuda", major * 10 + minor, 32)
    candidate_path = os.path.abspath(request["source_path"])
    used = Counter(candidate_path)
    install_driver(triton, torch, target, props, used)
    stub_torch_cuda(torch, props, used)
    state = compile_only(triton, events, int(request.get("threads", 2)))
    if request.get("utils", True):
        prebuild_utils(events)

    spec = importlib.util.spec_from_file_location("candidate", candidate_path)
    assert spec is not None and spec.loader is not None  # a .py path has both
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module  # as the sandbox names it (Triton's JIT looks it up)
    try:
        with as_cuda_mode(torch, "cpu", used):
            spec.loader.exec_module(module)
        entry = getattr(module, request["entry_point"])
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure
        events.say("import_failed", error=where(exc, candidate_path), stand_ins=used.counts)
        return
    events.say("imported", s=round(time.monotonic() - started, 3))

    ref_spec = importlib.util.spec_from_file_location("accelopt_ahead_reference", request["reference_path"])
    assert ref_spec is not None and ref_spec.loader is not None
    reference = importlib.util.module_from_spec(ref_spec)
    ref_spec.loader.exec_module(reference)
    completed = True
    for workload in request["workloads"]:
        args = (workload["params"], request["seed"], "cpu", request["dtype"])
        size = input_bytes(torch, reference.make_inputs, *args)
        backing = "meta" if size is not None and size > request["max_input_bytes"] else "cpu"
        began = time.monotonic()
        try:
            inputs = (meta_inputs(torch, reference.make_inputs, *args) if backing == "meta"
                      else reference.make_inputs(*args))
        except BaseException as exc:  # noqa: BLE001 - the task's own failure
            completed = False
            events.say("workload", name=workload["name"], ran=False, backing=backing, stage="make_inputs",
                       error=where(exc, ""))
            continue
        try:
            with as_cuda_mode(torch, backing, used):
                entry(*inputs)
            events.say("workload", name=workload["name"], ran=True, backing=backing, bytes=size,
                       s=round(time.monotonic() - began, 3))
        except BaseException as exc:  # noqa: BLE001 - what was compiled before it stays compiled
            completed = False
            events.say("workload", name=workload["name"], ran=False, backing=backing, bytes=size, stage="call",
                       error=where(exc, candidate_path))
        del inputs
    events.say("done", completed=completed, launched=state["launched"], configs=state["configs"],
               failed_configs=state["failed_configs"], stand_ins=used.counts,
               s=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - the log says the rest
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads the candidate started do not keep the process alive
