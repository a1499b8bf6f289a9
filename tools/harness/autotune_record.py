"""The judge's autotune record, typed once: what it sends back for each timed function (the
candidate, each comparator) about the configurations of its `@triton.autotune` kernels, as JSON.

Standard library only: the judge (judge.py, run as a script, importing nothing of the accelopt
package) loads this file by path, as it loads stats.py, and its autotuning (autotune_rounds.py)
builds the record with the constructors and updates below; result.py imports it, and its pydantic
`AutotuneRecord` reads the record's pins and given pins with the same two readers (`pins`,
`given`), so that what the judge pins and what a later process pins cannot differ.

The types are TypedDicts: the record stays the plain JSON the judge has always sent back, with the
same keys in the same order; a key a path does not fill is absent (the result reads it as its
default), never written as a default.

No `from __future__ import annotations` here: on Python 3.11 a TypedDict's NotRequired keys are
told apart only from annotations evaluated when the class is made.
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

# How the configurations of one timed function were chosen: `timed` by the judge on the GPU,
# `checked` (every configuration's correctness, no GPU: the first runs), `given` (pinned from an
# earlier evaluation of the same source), `first` (a comparator on the interpreter).
How = Literal["timed", "checked", "given", "first"]
DEFAULT_KEY = "*"  # in a pin: the configuration for a key no workload showed

# What the sandbox pins (sandbox.AutotuneControl.pins): per kernel, tuning key -> configuration
# index, DEFAULT_KEY -> the index for any other key.
Pins = dict[str, dict[str, int]]


class Listed(TypedDict):
    """One autotuner as the sandbox lists it (sandbox.AutotuneControl.autotuners)."""

    kernel: str
    key: list[str]
    configs: list[str]
    fields: list[dict[str, Any]]
    why: str | None


class TunedKernel(TypedDict):
    """One `@triton.autotune` kernel as the judge ran it (autotune_rounds.py): its configurations,
    which one each tuning key and each workload ran, and how that was decided."""

    kernel: str
    key: list[str]
    configs: list[str]             # each configuration as Triton prints it, in list order
    fields: list[dict[str, Any]]   # each configuration's every field as it ran (sandbox.config_fields)
    why: str | None                # why its own autotuner chooses (not controlled); None: the judge does
    digest: str                    # the list named by those fields (configs_digest)
    controlled: bool               # False: its own autotuner chose (`why`)
    choices: dict[str, int]        # tuning key (as the judge names it) -> configuration index
    default: int                   # for a key no workload showed
    ran: dict[str, int]            # workload -> configuration index it ran
    keys: NotRequired[dict[str, str]]  # workload -> its tuning key
    timed: NotRequired[bool]       # chosen on the GPU from the judge's rounds
    checked: NotRequired[int]      # configurations checked for correctness (the interpreter: all)
    times_us: NotRequired[dict[str, list[float | None]]]  # workload -> per configuration (None: cannot run)
    timer: NotRequired[dict[str, str]]  # workload -> "span" or "kernel_only" (host-dominated calls)
    failed: NotRequired[dict[str, str]]  # configuration index -> why it cannot run on this GPU (left out)
    advice: NotRequired[list[str]]  # what its shared tuning key costs (shared_key_notes), kept with its pins


class AutotuneRecord(TypedDict):
    """Who chose each autotuned configuration of one timed function; `notes`: what the choice
    costs, said with figures."""

    kernels: list[TunedKernel]
    notes: list[str]
    how: How | None


class GivenPin(TypedDict):
    """One kernel's pins as handed to a later evaluation of the same source (`given`): its choices
    and the configuration list they index, named by every field (`configs_digest`)."""

    choices: dict[str, int]
    configs: str
    advice: NotRequired[list[str]]  # the shared-key advice said when they were chosen


# ---------------------------------------------------------------- building it (the judge)

def configs_digest(fields: list[dict]) -> str:
    """A configuration list named by every field of every configuration (sandbox.config_fields), in
    order: a pin carried to another evaluation holds only where the list it indexes is this one."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tuned_kernel(listed: Listed) -> TunedKernel:
    """A kernel as the sandbox listed it, nothing chosen yet: the judge controls it where the
    sandbox can pin it (`why` None)."""
    fields = listed.get("fields") or []
    return TunedKernel(kernel=listed["kernel"], key=listed["key"], configs=listed["configs"], fields=fields,
                       why=listed["why"], digest=configs_digest(fields), controlled=listed["why"] is None,
                       choices={}, default=0, ran={})


def left_to_triton(k: TunedKernel, why: str) -> None:
    """Found, at a call, to run its own autotuner's choice: not the judge's to choose."""
    k["controlled"] = False
    k["why"] = why


def pinned_as_given(k: TunedKernel, pin: GivenPin) -> None:
    """The choices an earlier evaluation made, as handed back."""
    k["choices"] = {key: i for key, i in pin["choices"].items() if key != DEFAULT_KEY}
    k["default"] = pin["choices"].get(DEFAULT_KEY, 0)
    if pin.get("advice"):
        k["advice"] = list(pin["advice"])


def ran_under(k: TunedKernel, workload: str, key: str) -> None:
    """The workload ran under this tuning key: its configuration, by the kernel's choices."""
    k.setdefault("keys", {})[workload] = key
    k["ran"][workload] = k["choices"].get(key, k["default"])


def checked_all(k: TunedKernel, *, keys: dict[str, str]) -> None:
    """Every configuration checked correct on every workload (no GPU to time on): the first runs."""
    k["checked"] = len(k["configs"])
    k["choices"] = {}
    k["default"] = 0
    k["keys"] = keys
    k["ran"] = {w: 0 for w in keys}


def timed_choice(k: TunedKernel, *, choices: dict[str, int], default: int, keys: dict[str, str],
                 times_us: dict[str, list[float | None]], timer: dict[str, str], failed: dict[str, str]) -> None:
    """Chosen on the GPU from the judge's rounds: per key, and what each workload runs by it."""
    k["choices"] = choices
    k["default"] = default
    k["timed"] = True
    k["ran"] = {w: choices[key] for w, key in keys.items()}
    k["keys"] = keys
    k["times_us"] = times_us
    k["timer"] = timer
    k["failed"] = failed


# ---------------------------------------------------------------- reading it (the judge and the result)

def pins(record: AutotuneRecord) -> Pins:
    """What the sandbox pins (sandbox.AutotuneControl.pins): the same choice, in this process or
    another. The one reader: the judge pins with it, and result.AutotuneRecord.pins reads with it."""
    return {k["kernel"]: {**k["choices"], DEFAULT_KEY: k["default"]} for k in record["kernels"] if k["controlled"]}


def given(record: AutotuneRecord) -> dict[str, GivenPin]:
    """The pins as handed to a later evaluation of the same source: per kernel its choices and the
    configuration list they index, named by every field (what `stale` reads back), and the advice
    on a shared key said when they were chosen: the same source gets it at every evaluation, in a
    process that chose or one handed the choice (it was said at 1 of 5 warm checks without)."""
    chosen, out = pins(record), {}
    for k in record["kernels"]:
        if k["kernel"] in chosen:
            out[k["kernel"]] = GivenPin(choices=chosen[k["kernel"]], configs=k["digest"])
            if k.get("advice"):
                out[k["kernel"]]["advice"] = list(k["advice"])
    return out


def stale(kernels: list[TunedKernel], given_pins: Mapping[str, Any]) -> list[str]:
    """Why pins given from an earlier evaluation cannot be applied: a kernel whose configuration list
    (by every field, `configs_digest`) is not the one the pins index. Empty: they apply."""
    notes = []
    for k in kernels:
        pin = given_pins.get(k["kernel"])
        if not isinstance(pin, dict) or pin.get("configs") != k["digest"]:
            notes.append(f"{k['kernel']}: the configuration chosen before does not name this evaluation's "
                         f"configurations by their fields (its autotuner lists {len(k['configs'])}, other than "
                         "those chosen from): chosen anew")
    return notes
