"""FlashInfer-Bench's data model as the importer and exporter need it, and how FlashInfer-Bench
judges each Definition.

Only the fields we use are modelled; the tests check what we write with flashinfer-bench's own
models and `validate`. The judging rules mirror flashinfer_bench/bench (evaluators/registry.py,
config.py, eval_config.yaml at commit 40e6ca7): every output is compared elementwise, an element
failing only when it is outside both atol and rtol (1e-2 each by default), except where a
dedicated evaluator takes over.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, field_validator, model_validator

from accelopt.tools.task import TaskError, read_utf8

# FlashInfer-Bench's defaults (bench/config.py ResolvedEvalConfig; `flashinfer-bench run --atol/--rtol`).
FIB_ATOL = 1e-2
FIB_RTOL = 1e-2
# Its filters on a Trace's max errors: `report best` (TraceSet.get_best_trace) and apply() (ApplyConfig).
REPORT_BEST_MAX_ERRORS = (1e-2, 1e-2)
APPLY_MAX_ERRORS = (1e-2, 1e-5)
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INDEX_DTYPES = ("int32", "int64", "int16", "int8")
# A Definition's optional lists, which the published datasets (flashinfer-trace, and AccelOpt's copies of it)
# write as null when absent; flashinfer-bench 0.1.2's own model refuses null there. Null means empty.
NULLABLE_LISTS = ("tags", "constraints")


class Axis(BaseModel):
    type: Literal["const", "var"]
    value: int | None = None


class Tensor(BaseModel):
    shape: list[str] | None
    dtype: Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
                   "int64", "int32", "int16", "int8", "bool"]


class Definition(BaseModel):
    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    reference: str
    description: str | None = None
    tags: list[str] = []
    constraints: list[str] = []

    @field_validator(*NULLABLE_LISTS, mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @property
    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if a.type == "var"]

    def axis_values(self, var_axes: dict[str, int]) -> dict[str, int]:
        return {**{k: int(a.value or 0) for k, a in self.axes.items() if a.type == "const"},
                **{k: int(v) for k, v in var_axes.items() if k in self.axes}}


class Workload(BaseModel):
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, dict[str, Any]]


def read_definition(path: Path) -> Definition:
    try:
        if not path.is_file():
            raise TaskError(f"definition not found: {path}")
        definition = Definition.model_validate(json.loads(read_utf8(path)))
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except ValidationError as e:
        first = e.errors()[0]
        raise TaskError(f"{path}: not a FlashInfer-Bench Definition: {'.'.join(map(str, first['loc']))}: "
                        f"{first['msg']}") from None
    try:  # a reference that cannot even compile is the Definition's fault, found before anything is written
        compile(definition.reference, f"{path.name}:reference", "exec")
    except SyntaxError as e:
        raise TaskError(f"{path}: the Definition's reference has a syntax error at line {e.lineno}: {e.msg}") from None
    return definition


def read_workloads(path: Path, definition: Definition) -> list[dict]:
    """Workload objects, from a JSONL of Workloads or of workload Traces (the dataset's layout),
    checked as FlashInfer-Bench's `validate` checks them: every variable axis given, the inputs
    exactly the Definition's, scalars where the Definition has scalars."""
    rows = []
    for number, line in enumerate(read_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskError(f"{path}:{number}: invalid JSON: {e.msg}") from None
        if "workload" in row:
            if row.get("definition") not in (None, definition.name):
                continue
            row = row["workload"]
        try:
            workload = Workload.model_validate(row).model_dump()
        except ValidationError as e:
            raise TaskError(f"{path}:{number}: not a Workload: {e.errors()[0]['msg']}") from None
        _check_workload(workload, definition, f"{path}:{number}")
        rows.append(workload)
    return rows


class SourceFile(BaseModel):
    path: str
    content: str

    @model_validator(mode="after")
    def _relative(self) -> SourceFile:
        if not self.path or Path(self.path).is_absolute() or ".." in Path(self.path).parts:
            raise ValueError(f"source path {self.path!r} must be relative, inside the solution")
        return self


class BuildSpec(BaseModel):
    language: str  # triton, python, cuda, cpp, tilelang: checked by who reads it, so a refusal can name it
    target_hardware: list[str] = []
    entry_point: str  # "<file>::<function>"
    dependencies: list[str] = []
    # FlashInfer-Bench 0.1.2 defaults to True, but the published Solutions predate the field and return
    # their outputs: absent means what they do.
    destination_passing_style: bool = False

    @field_validator("target_hardware", "dependencies", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("entry_point")
    @classmethod
    def _file_and_function(cls, value: str) -> str:
        if value.count("::") != 1 or not all(value.split("::")):
            raise ValueError(f"entry_point {value!r} is not '<file>::<function>'")
        return value


class Solution(BaseModel):
    """A FlashInfer-Bench Solution: what the exporter writes (solution_dict) and a baseline may be."""
    name: str
    definition: str
    author: str
    description: str | None = None
    spec: BuildSpec
    sources: list[SourceFile]

    @model_validator(mode="after")
    def _entry_file_in_sources(self) -> Solution:
        paths = [s.path for s in self.sources]
        if len(set(paths)) != len(paths):
            raise ValueError("duplicate source paths")
        if self.entry_file not in paths:
            raise ValueError(f"entry file {self.entry_file} is not among the sources")
        return self

    @property
    def entry_file(self) -> str:
        return self.spec.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.spec.entry_point.split("::")[1]


def parse_solution(text: str, where: Path) -> Solution:
    """A Solution from JSON text; TaskError, one line, when it is not one."""
    try:
        return Solution.model_validate(json.loads(text))
    except json.JSONDecodeError as e:
        raise TaskError(f"{where}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where_in = ".".join(map(str, first["loc"])) or "(top level)"
        raise TaskError(f"{where}: a JSON file but not a FlashInfer-Bench Solution: {where_in}: "
                        f"{first['msg'].removeprefix('Value error, ')}") from None


def _check_workload(workload: dict, definition: Definition, where: str) -> None:
    missing = [a for a in definition.var_axes if a not in workload["axes"]]
    if missing:
        raise TaskError(f"{where}: workload {workload['uuid']} lacks axes {', '.join(missing)}")
    unknown = sorted(set(workload["inputs"]) - set(definition.inputs))
    if unknown:
        raise TaskError(f"{where}: workload {workload['uuid']} has inputs the Definition lacks: {', '.join(unknown)}")
    for name, spec in workload["inputs"].items():
        kind = spec.get("type")
        if kind not in ("random", "scalar", "safetensors"):
            raise TaskError(f"{where}: input {name}: unknown input type {kind!r}")
        if (kind == "scalar") != (definition.inputs[name].shape is None) and kind != "random":
            raise TaskError(f"{where}: input {name} is {kind} but the Definition says "
                            f"{'scalar' if definition.inputs[name].shape is None else 'tensor'}")
        if kind == "safetensors" and not (spec.get("path") and spec.get("tensor_key")):
            raise TaskError(f"{where}: input {name}: a safetensors input needs path and tensor_key")


# ---------------------------------------------------------------- how FlashInfer-Bench judges it

class Judging(BaseModel):
    evaluator: str
    atol: float = FIB_ATOL
    rtol: float = FIB_RTOL
    required_matched_ratio: float | None = None
    note: str = ""


_DSA_SPARSE_ATTENTION = {"dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1",
                         "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"}


def fib_judging(definition: Definition) -> Judging:
    """The evaluator flashinfer-bench resolves for this Definition and its correctness rule.
    Raises TaskError, naming the evaluator, where accelopt's judge has no equivalent."""
    name, op = definition.name, definition.op_type
    # SamplingEvaluator matches op_type "sampling"; any sampling op is random, so no elementwise check fits.
    if "sampling" in op:
        raise TaskError(f"{name}: FlashInfer-Bench judges it with SamplingEvaluator, a distribution test over "
                        "repeated samples; accelopt's elementwise check cannot judge a sampling kernel")
    if name.startswith("dsa_topk_indexer"):
        raise TaskError(f"{name}: FlashInfer-Bench judges it with DsaTopkIndexerEvaluator (the scores at the "
                        "returned indices, sorted, against the reference's); accelopt's judge has no such check")
    ratio = None
    if "moe_fp8_block_scale" in name:
        evaluator, ratio = "LowBitEvaluator", 0.95
    elif op == "moe":  # eval_config.yaml: op_type moe requires a matched ratio of 0.95
        evaluator, ratio = "DefaultEvaluator (op_type moe)", 0.95
    elif name in _DSA_SPARSE_ATTENTION:
        return Judging(evaluator="DsaSparseAttentionEvaluator",
                       note="FlashInfer-Bench accepts the output alone (lse optional); here both are checked")
    else:
        return Judging(evaluator="DefaultEvaluator")
    if not _judge_has_matched_ratio():
        raise TaskError(f"{name}: FlashInfer-Bench judges it with {evaluator}: {ratio:.0%} of the elements within "
                        "atol/rtol (a matched ratio); accelopt's judge has no matched-ratio rule yet, and an "
                        "all-elements check would reject kernels FlashInfer-Bench accepts")
    return Judging(evaluator=evaluator, required_matched_ratio=ratio)


def _judge_has_matched_ratio() -> bool:
    """Whether the task format carries a matched ratio for the judge (tools/task.py)."""
    from accelopt.tools.task import TaskSpec

    return "required_matched_ratio" in TaskSpec.model_fields


# ---------------------------------------------------------------- paged inputs

class Paging(BaseModel):
    """Inputs read through an index: pools (`*_cache`) whose leading axis is `pool_axis`, read
    at the rows `indices` name. Only what is read counts toward bytes moved."""
    pool_axis: str
    pools: list[str]
    indices: list[str]


def find_paging(definition: Definition) -> Paging | None:
    indices = [n for n, t in definition.inputs.items()
               if t.dtype in INDEX_DTYPES and t.shape and re.search(r"indices|block_table", n)]
    pools = [n for n, t in definition.inputs.items()
             if t.shape and re.search(r"cache$|_pool$", n) and definition.axes[t.shape[0]].type == "var"]
    heads = {definition.inputs[n].shape[0] for n in pools}  # type: ignore[index]
    if not indices or not pools or len(heads) != 1:
        return None
    return Paging(pool_axis=heads.pop(), pools=pools, indices=indices)


def tensor_numel(tensor: Tensor, axes: dict[str, int]) -> int:
    return math.prod(axes[a] for a in tensor.shape) if tensor.shape else 1


def workload_numel(definition: Definition, var_axes: dict[str, int]) -> int:
    """Elements of every input and output at these axes: what the CPU interpreter must touch."""
    axes = definition.axis_values(var_axes)
    return sum(tensor_numel(t, axes) for t in [*definition.inputs.values(), *definition.outputs.values()])


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "task"


def workload_entry(row: dict, index: int, prefix: str = "") -> dict:
    """A task workload for a FlashInfer-Bench workload: its axes and scalars, and `fib_row`, the
    row of workloads.jsonl (then interpreter.jsonl) it stands for."""
    params: dict[str, int | float] = dict(row["axes"])
    for name, spec in row["inputs"].items():
        if spec.get("type") == "scalar":
            params[name] = float(spec["value"]) if isinstance(spec["value"], float) else int(spec["value"])
    params["fib_row"] = index
    label = "_".join(f"{k}{v}" for k, v in row["axes"].items())
    tag = hashlib.sha1(row["uuid"].encode()).hexdigest()[:6]  # uuids may share prefixes
    return {"name": prefix + (f"{label}_{tag}" if label else tag), "params": params}
