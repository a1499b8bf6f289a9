"""Rebuild the real-world corpus from a snapshot of github.com/zhang677/AccelOpt.

    python -m evals.realworld.build --git-dir /path/to/AccelOpt/.git

Writes, under evals/realworld/: solutions/<model>_<definition>_<id>.py (the upstream
Solution's main.py, byte for byte), tasks/<definition>/ (imported with
evals.interop.flashinfer.import_definition from the upstream Definition and Workloads), and
manifest.json. Nothing here runs in the tests: they read what it wrote.

Where the upstream workloads name safetensors blobs (index tensors of the attention ops, kept in
the flashinfer-trace dataset, not in the repository), this script writes synthetic index tensors
of the same shapes: valid indptr/indices for those axes, random lengths, seeded by the workload
uuid. The manifest and task.json say so. Attention tasks also get one tiny synthetic workload
for the CPU interpreter (the importer would otherwise keep the smallest real one unshrunk).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = "zhang677/AccelOpt"
# The FlashInfer-Bench experiment inputs as AccelOpt selected them (definitions, workloads, and the
# fastest Triton solution per definition in the flashinfer-trace dataset); d16221a holds the full
# selection, later commits keep a subset.
SELECT_COMMIT = "d16221adf6bda2ed5ef8970005fa58972a75b714"
HEAD_COMMIT = "47e29a7c24704e3c3e534b5bcbf39cfac3f831e3"
FLB = "experiments/flb_optimize"
INTERP_PREFIX = "accelopt-interp-"

# (definition, family dir, upstream solution path, model label, commit holding that path)
PAIRS = [
    # Solutions from the flashinfer-trace dataset (each written by the named model), as copied
    # into AccelOpt's experiments/flb_optimize/solutions.
    ("gemm_n128_k2048", "gemm", "gemini-2.5-pro_triton_kmw3sz.json", "gemini-2.5-pro", SELECT_COMMIT),
    ("gemm_n2048_k4096", "gemm", "claude-opus-4-1-20250805_triton_faa4d0.json", "claude-opus-4-1", SELECT_COMMIT),
    ("gemm_n28672_k4096", "gemm", "gpt-o3_triton_4c9c32.json", "o3", HEAD_COMMIT),
    ("gemm_n4096_k14336", "gemm", "gemini-2.5-pro_triton_q84sir.json", "gemini-2.5-pro", SELECT_COMMIT),
    ("gemm_n4096_k4096", "gemm", "gpt-5_triton_14f133.json", "gpt-5", SELECT_COMMIT),
    ("gemm_n6144_k4096", "gemm", "gpt-5_triton_793693.json", "gpt-5", SELECT_COMMIT),
    ("rmsnorm_h128", "rmsnorm", "gemini-2.5-pro_triton_jaedrq.json", "gemini-2.5-pro", SELECT_COMMIT),
    ("rmsnorm_h128", "rmsnorm", "gpt-o3_triton_35b90e.json", "o3", HEAD_COMMIT),
    ("rmsnorm_h1536", "rmsnorm", "gemini-2.5-pro_triton_xndzsl.json", "gemini-2.5-pro", SELECT_COMMIT),
    ("rmsnorm_h4096", "rmsnorm", "gpt-5_triton_21bcc2.json", "gpt-5", SELECT_COMMIT),
    ("rmsnorm_h7168", "rmsnorm", "claude-opus-4-1_triton_91c9a3.json", "claude-opus-4-1", SELECT_COMMIT),
    ("fused_add_rmsnorm_h2048", "rmsnorm", "gpt-o3_triton_2e18c2.json", "o3", SELECT_COMMIT),
    ("fused_add_rmsnorm_h4096", "rmsnorm", "gemini-2.5-pro_triton_dc28mj.json", "gemini-2.5-pro", SELECT_COMMIT),
    ("fused_add_rmsnorm_h7168", "rmsnorm", "gemini-2.5-pro_triton_05pwmx.json", "gemini-2.5-pro", HEAD_COMMIT),
    ("gqa_paged_decode_h32_kv4_d128_ps1", "gqa_paged", "gpt-5_triton_f88811.json", "gpt-5", HEAD_COMMIT),
    ("gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged", "gpt-o3_triton_c3c0cc.json", "o3", SELECT_COMMIT),
    ("gqa_paged_prefill_causal_h32_kv8_d128_ps1", "gqa_paged", "gemini-2.5-pro_triton_3j61np.json",
     "gemini-2.5-pro", HEAD_COMMIT),
    ("gqa_ragged_prefill_causal_h32_kv4_d128", "gqa_ragged", "claude-opus-4-1_triton_28277f.json",
     "claude-opus-4-1", HEAD_COMMIT),
    ("gqa_ragged_prefill_causal_h32_kv4_d128", "gqa_ragged", "gemini-2.5-pro_triton_zezbpc.json", "gemini-2.5-pro",
     SELECT_COMMIT),
    ("gqa_ragged_prefill_causal_h32_kv8_d128", "gqa_ragged", "gpt-5_triton_7308c5.json", "gpt-5", SELECT_COMMIT),
    ("mla_paged_prefill_causal_h16_ckv512_kpe64_ps1", "mla_paged", "gpt-5_triton_88089a.json", "gpt-5", HEAD_COMMIT),
    # AccelOpt's own optimized solutions (samples/fib: gpt-oss-120b agents with fixers, H100).
    ("gqa_paged_decode_h32_kv4_d128_ps1", None,
     "samples/fib/gqa_paged_decode_h32_kv4_d128_ps1_179eaadd8f774d70a52e6932d7f5f0f8.json", "accelopt-gpt-oss-120b",
     HEAD_COMMIT),
    ("gqa_paged_decode_h32_kv8_d128_ps1", None,
     "samples/fib/gqa_paged_decode_h32_kv8_d128_ps1_0cb2d36f3f91486f95befba29bfa03bf.json", "accelopt-gpt-oss-120b",
     HEAD_COMMIT),
    ("gqa_paged_prefill_causal_h32_kv8_d128_ps1", None,
     "samples/fib/gqa_paged_prefill_causal_h32_kv8_d128_ps1_0a8519f38e1a4f5695f847be8cce4ff7.json",
     "accelopt-gpt-oss-120b", HEAD_COMMIT),
    ("gqa_ragged_prefill_causal_h32_kv8_d128", None,
     "samples/fib/gqa_ragged_prefill_causal_h32_kv8_d128_728c5634427f48f2948db191af003533.json",
     "accelopt-gpt-oss-120b", HEAD_COMMIT),
]

# Upstream workloads per definition, at most two (the small one from the definition's own workload
# file and the heavy one AccelOpt selected). (uuid, axes, scalar inputs).
_DECODE_SCALE = 0.0883883461356163
_MLA_SCALE = 0.1352337747812271
WORKLOADS: dict[str, list[tuple[str, dict, dict]]] = {
    "gemm_n128_k2048": [("a32cca89-8f03-45b7-8764-c1aaceb8322e", {"M": 2}, {}),
                        ("5893ab1a-2e62-4157-b845-ee089f9fb9f4", {"M": 12853}, {})],
    "gemm_n2048_k4096": [("0d81c8cba4e0419d930c49f025bf248a", {"M": 15813}, {})],
    "gemm_n28672_k4096": [("cb7a5636-4658-4a52-b8ac-fd0c7213381b", {"M": 15}, {}),
                          ("32cd2698-78a7-4446-9691-2b3e42fc68b7", {"M": 8192}, {})],
    "gemm_n4096_k14336": [("86b21a3d-66e2-4837-9e15-948f282ed2df", {"M": 8192}, {})],
    "gemm_n4096_k4096": [("54062a8b-a9ca-47d8-b5ef-7f6f0325ef39", {"M": 40}, {}),
                         ("b626104c-94cc-436b-9d2c-1d31432c1a87", {"M": 8192}, {})],
    "gemm_n6144_k4096": [("e2a669f0-171e-4e7e-9a8f-8371097345bd", {"M": 48}, {}),
                         ("33a78bbf-0071-43b4-874b-60aee52b5f08", {"M": 8192}, {})],
    "rmsnorm_h128": [("3b02c1b8-29dc-4c13-86a0-b7834daad8a1", {"batch_size": 1088}, {}),
                     ("f2872f89-5d8d-403a-9603-5918541cb9e0", {"batch_size": 520128}, {})],
    "rmsnorm_h1536": [("c2c0808b-f368-434a-bbd7-09c79cec998b", {"batch_size": 64}, {}),
                      ("1a428793-51ec-4eba-9d7c-9b7032d059eb", {"batch_size": 14521}, {})],
    "rmsnorm_h4096": [("818219cc-f770-4957-84cd-cafdfb53e64b", {"batch_size": 79}, {}),
                      ("841b0afa-80fa-449a-9e1d-f294da92d02f", {"batch_size": 14509}, {})],
    "rmsnorm_h7168": [("5b601f70-1495-4c70-9870-e05dc771f1c1", {"batch_size": 14521}, {})],
    "fused_add_rmsnorm_h2048": [("906efdc6-aa3b-4b4f-a291-3a2be509d354", {"batch_size": 6}, {}),
                                ("724a6dfa-06ff-45b7-9972-d174a0e23737", {"batch_size": 16254}, {})],
    "fused_add_rmsnorm_h4096": [("9595903c-68c2-4bd2-bdbf-0bc1c6dcb8af", {"batch_size": 14418}, {}),
                                ("3e460c8c-7cad-4071-959f-e689ca024206", {"batch_size": 14509}, {})],
    "fused_add_rmsnorm_h7168": [("d9c27791-1f27-4feb-adb6-aa8a8c20556f", {"batch_size": 14521}, {})],
    "gqa_paged_decode_h32_kv4_d128_ps1": [
        ("23e02562-75ca-474a-a527-078df0c18fab",
         {"batch_size": 1, "num_pages": 486, "len_indptr": 2, "num_kv_indices": 436}, {"sm_scale": 0.08838834764831843}),
        ("7a7fc288-c6af-40ce-8b64-7a18408d3d25",
         {"batch_size": 64, "num_pages": 61535, "len_indptr": 65, "num_kv_indices": 61519}, {"sm_scale": _DECODE_SCALE})],
    "gqa_paged_decode_h32_kv8_d128_ps1": [
        ("55b7d182-cd32-4c5c-b8e0-127a85c64e03",
         {"batch_size": 1, "num_pages": 71, "len_indptr": 2, "num_kv_indices": 54}, {"sm_scale": _DECODE_SCALE}),
        ("5444fc56-b282-4228-b233-ee170d1bd127",
         {"batch_size": 64, "num_pages": 68237, "len_indptr": 65, "num_kv_indices": 58966}, {"sm_scale": _DECODE_SCALE})],
    "gqa_paged_prefill_causal_h32_kv8_d128_ps1": [
        ("25f2945c-c282-47a9-ac12-bbc702a218f4",
         {"len_indptr": 2, "total_q": 1, "num_kv_indices": 34, "num_pages": 51}, {"sm_scale": 0.08838834764831843})],
    "gqa_ragged_prefill_causal_h32_kv4_d128": [
        ("b3445888-8668-4721-9359-9da119ab9f34", {"len_indptr": 16, "total_q": 969, "total_kv": 969},
         {"sm_scale": 0.08838834764831843}),
        ("007ddabb-3c8c-48a1-a693-c0618d32243c", {"len_indptr": 34, "total_q": 16294, "total_kv": 16294},
         {"sm_scale": _DECODE_SCALE})],
    "gqa_ragged_prefill_causal_h32_kv8_d128": [
        ("2328b031-69cc-4217-8e14-e341dd418733", {"len_indptr": 16, "total_q": 982, "total_kv": 982},
         {"sm_scale": _DECODE_SCALE}),
        ("7a08a0f6-7dd4-4de9-bb5b-847c51969faa", {"len_indptr": 11, "total_q": 12571, "total_kv": 12571},
         {"sm_scale": 0.08838834764831843})],
    "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1": [
        ("55b51e96-eecc-4dc9-814a-0f1301b2951e",
         {"total_q": 33, "num_pages": 989669, "len_indptr": 2, "num_kv_indices": 34}, {"sm_scale": _MLA_SCALE}),
        ("733a7bbe-55fc-4834-82db-f428949e8ab2",
         {"total_q": 3024, "num_pages": 989669, "len_indptr": 4, "num_kv_indices": 3029}, {"sm_scale": _MLA_SCALE})],
}
# One tiny workload per attention definition, for the CPU interpreter only.
INTERPRETER: dict[str, tuple[dict, dict]] = {
    "gqa_paged_decode_h32_kv4_d128_ps1": ({"batch_size": 2, "num_pages": 24, "len_indptr": 3, "num_kv_indices": 19},
                                          {"sm_scale": _DECODE_SCALE}),
    "gqa_paged_decode_h32_kv8_d128_ps1": ({"batch_size": 2, "num_pages": 24, "len_indptr": 3, "num_kv_indices": 19},
                                          {"sm_scale": _DECODE_SCALE}),
    "gqa_paged_prefill_causal_h32_kv8_d128_ps1": ({"len_indptr": 3, "total_q": 5, "num_kv_indices": 14,
                                                   "num_pages": 20}, {"sm_scale": _DECODE_SCALE}),
    "gqa_ragged_prefill_causal_h32_kv4_d128": ({"len_indptr": 3, "total_q": 12, "total_kv": 12},
                                               {"sm_scale": _DECODE_SCALE}),
    "gqa_ragged_prefill_causal_h32_kv8_d128": ({"len_indptr": 3, "total_q": 12, "total_kv": 12},
                                               {"sm_scale": _DECODE_SCALE}),
    "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1": ({"total_q": 5, "num_pages": 16, "len_indptr": 3,
                                                       "num_kv_indices": 9}, {"sm_scale": _MLA_SCALE}),
}


# Why each solution cannot be checked on the Triton interpreter (CPU): the first obstacle a run on
# the interpreter meets, as seen when this corpus was built. None is the solution's fault: they
# were written for a GPU. A pair whose solution does run there would get {"runs": True}.
_CUDA = "needs CUDA: raises when torch.cuda.is_available() is False (its own device check)"
_BF16 = "bf16-only: rejects the float32 inputs a bf16 task gets on the interpreter (its own dtype check)"
_FALLBACK = ("takes its PyTorch CPU fallback when no GPU is visible: no Triton kernel runs on the "
             "interpreter, so there is nothing to check there")
_AUTOTUNE = ("@triton.autotune over several configs benchmarks them on a GPU: on the interpreter Triton "
             "finds no driver ('0 active drivers')")
INTERPRETER_SKIPS = {
    "gemini-2.5-pro_gemm_n128_k2048_kmw3sz": _CUDA + "; also @triton.autotune over 9 configs",
    "claude-opus-4-1_gemm_n2048_k4096_faa4d0": _CUDA,
    "o3_gemm_n28672_k4096_4c9c32": _CUDA,
    "gemini-2.5-pro_gemm_n4096_k14336_q84sir": _CUDA,
    "gpt-5_gemm_n4096_k4096_14f133": _CUDA + "; also @triton.autotune over 4 configs",
    "gpt-5_gemm_n6144_k4096_793693": _FALLBACK + " (torch.matmul)",
    "gemini-2.5-pro_rmsnorm_h128_jaedrq": _BF16,
    "o3_rmsnorm_h128_35b90e": _FALLBACK,
    "gemini-2.5-pro_rmsnorm_h1536_xndzsl": _BF16,
    "gpt-5_rmsnorm_h4096_21bcc2": _BF16 + "; then " + _CUDA,
    "claude-opus-4-1_rmsnorm_h7168_91c9a3": _CUDA,
    "o3_fused_add_rmsnorm_h2048_2e18c2": _BF16,
    "gemini-2.5-pro_fused_add_rmsnorm_h4096_dc28mj": _CUDA,
    "gemini-2.5-pro_fused_add_rmsnorm_h7168_05pwmx": _CUDA,
    "gpt-5_gqa_paged_decode_h32_kv4_d128_ps1_f88811": _BF16 + "; then " + _CUDA,
    "o3_gqa_paged_decode_h32_kv8_d128_ps1_c3c0cc": _CUDA,
    "gemini-2.5-pro_gqa_paged_prefill_causal_h32_kv8_d128_ps1_3j61np": _CUDA + "; also @triton.autotune over 9 configs",
    "claude-opus-4-1_gqa_ragged_prefill_causal_h32_kv4_d128_28277f": _CUDA,
    "gemini-2.5-pro_gqa_ragged_prefill_causal_h32_kv4_d128_zezbpc": _CUDA,
    "gpt-5_gqa_ragged_prefill_causal_h32_kv8_d128_7308c5": _CUDA,
    "gpt-5_mla_paged_prefill_causal_h16_ckv512_kpe64_ps1_88089a": _CUDA,
    "accelopt-gpt-oss-120b_gqa_paged_decode_h32_kv4_d128_ps1_179eaadd": _AUTOTUNE,
    "accelopt-gpt-oss-120b_gqa_paged_decode_h32_kv8_d128_ps1_0cb2d36f": _AUTOTUNE,
    "accelopt-gpt-oss-120b_gqa_paged_prefill_causal_h32_kv8_d128_ps1_0a8519f3": _AUTOTUNE,
    "accelopt-gpt-oss-120b_gqa_ragged_prefill_causal_h32_kv8_d128_728c5634": _AUTOTUNE,
}


def git_show(git_dir: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def git_blob(git_dir: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _split(total: int, parts: int, rng: random.Random) -> list[int]:
    """`parts` positive lengths summing to `total`."""
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def synth_indices(definition: str, axes: dict, seed: str) -> dict:
    """Index tensors (int32) valid for these axes, as the definition's reference asserts them."""
    import torch

    rng = random.Random(seed)
    out = {}
    batches = axes["len_indptr"] - 1
    if "ragged" in definition:  # self-attention over each sequence: q and kv lengths are equal
        lengths = _split(axes["total_q"], batches, rng)
        indptr = [0]
        for n in lengths:
            indptr.append(indptr[-1] + n)
        out["qo_indptr"] = torch.tensor(indptr, dtype=torch.int32)
        out["kv_indptr"] = torch.tensor(indptr, dtype=torch.int32)
        return out
    if "decode" in definition:
        kv_lengths = _split(axes["num_kv_indices"], batches, rng)
    else:  # incremental prefill: each sequence's kv is its cached prefix plus its new queries
        q_lengths = _split(axes["total_q"], batches, rng)
        extra = axes["num_kv_indices"] - axes["total_q"]
        prefixes = _split(extra + batches, batches, rng)  # >= 1 each, then less one: >= 0
        kv_lengths = [q + p - 1 for q, p in zip(q_lengths, prefixes)]
        out["qo_indptr"] = torch.tensor([0, *_cumsum(q_lengths)], dtype=torch.int32)
    out["kv_indptr"] = torch.tensor([0, *_cumsum(kv_lengths)], dtype=torch.int32)
    pages = rng.sample(range(axes["num_pages"]), axes["num_kv_indices"])  # distinct pages, scattered
    out["kv_indices"] = torch.tensor(pages, dtype=torch.int32)
    return out


def _cumsum(values: list[int]) -> list[int]:
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out


def build_task(git_dir: Path, definition: str, family: str, out_root: Path) -> Path:
    from safetensors.torch import save_file

    from accelopt.evals.interop.flashinfer import import_definition
    from accelopt.tools.task import load_task

    def_path = f"{FLB}/definitions/{family}/{definition}/{definition}.json"
    spec = json.loads(git_show(git_dir, SELECT_COMMIT, def_path))
    index_inputs = [n for n, t in spec["inputs"].items() if t["dtype"] == "int32" and t["shape"] is not None]
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "definition.json").write_bytes(git_show(git_dir, SELECT_COMMIT, def_path))
        rows = []
        entries = [(u, a, s, False) for u, a, s in WORKLOADS[definition]]
        if definition in INTERPRETER:
            a, s = INTERPRETER[definition]
            entries.append((INTERP_PREFIX + definition, a, s, True))
        for uuid, axes, scalars, _ in entries:
            inputs = {n: {"type": "random"} for n in spec["inputs"]}
            inputs.update({n: {"type": "scalar", "value": v} for n, v in scalars.items()})
            if index_inputs:
                tensors = synth_indices(definition, axes, uuid)
                name = f"{definition}_{uuid[:8] if not uuid.startswith(INTERP_PREFIX) else 'interp'}_synthetic"
                (tmp / "data").mkdir(exist_ok=True)
                save_file(tensors, str(tmp / "data" / f"{name}.safetensors"))
                for n in index_inputs:
                    inputs[n] = {"type": "safetensors", "path": f"data/{name}.safetensors", "tensor_key": n}
            rows.append({"uuid": uuid, "axes": axes, "inputs": inputs})
        (tmp / "workloads.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = out_root / definition
        import_definition(tmp / "definition.json", tmp / "workloads.jsonl", out)
    task = json.loads((out / "task.json").read_text())
    real = {_entry_name(u, a) for u, a, _, interp in entries if not interp}
    task["workloads"] = [w for w in task["workloads"] if w["name"] in real]
    task["origin"] = {**task["origin"], "repository": REPO, "commit": SELECT_COMMIT, "path": def_path,
                      "workloads": "axes and scalars from the upstream workloads; index tensors synthetic"
                      if index_inputs else "axes from the upstream workloads; every input random"}
    (out / "task.json").write_text(json.dumps(task, indent=2) + "\n")
    load_task(out)
    return out


def _entry_name(uuid: str, axes: dict) -> str:
    label = "_".join(f"{k}{v}" for k, v in axes.items())
    return f"{label}_{hashlib.sha1(uuid.encode()).hexdigest()[:6]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--git-dir", type=Path, required=True, help="a git dir of github.com/zhang677/AccelOpt")
    args = parser.parse_args()
    (HERE / "LICENSE-AccelOpt").write_bytes(git_show(args.git_dir, HEAD_COMMIT, "LICENSE"))
    (HERE / "solutions").mkdir(exist_ok=True)
    (HERE / "tasks").mkdir(exist_ok=True)
    families = {d: f for d, f, *_ in PAIRS if f}
    for definition, task_family in sorted(families.items()):
        build_task(args.git_dir, definition, task_family, HERE / "tasks")
        print("task", definition)
    pairs = []
    for definition, family, solution, model, commit in PAIRS:
        path = f"{FLB}/solutions/{family}/{definition}/{solution}" if family else solution
        upstream = json.loads(git_show(args.git_dir, commit, path))
        assert upstream["definition"] == definition, (path, upstream["definition"])
        (source,) = [s for s in upstream["sources"] if s["path"] == "main.py"]
        ident = upstream["name"].split("_")[-1][:8] if family else upstream["name"][:8]
        name = f"{model}_{definition}_{ident}"
        dest = HERE / "solutions" / f"{name}.py"
        dest.write_bytes(source["content"].encode())
        pairs.append({
            "name": name, "definition": definition, "task": f"tasks/{definition}",
            "solution": f"solutions/{name}.py", "model": model,
            "author": upstream.get("author"), "language": upstream["spec"]["language"],
            "entry_point": upstream["spec"]["entry_point"],
            "destination_passing_style": bool(upstream["spec"].get("destination_passing_style", False)),
            "adapter": None,
            "origin": {"repository": REPO, "path": path, "commit": commit,
                       "blob": git_blob(args.git_dir, commit, path), "solution_name": upstream["name"],
                       "description": upstream.get("description", "")},
            "sha256": hashlib.sha256(source["content"].encode()).hexdigest(),
            "interpreter": ({"runs": False, "reason": INTERPRETER_SKIPS[name]} if name in INTERPRETER_SKIPS
                            else {"runs": True}),
        })
        print("solution", name)
    manifest = {
        "description": "LLM-written FlashInfer-Bench Triton solutions, each paired with the task imported from its "
                       "Definition; every one is honest and correct on a GPU, so the harness must accept it.",
        "license": "Apache-2.0 (zhang677/AccelOpt; see LICENSE-AccelOpt)",
        "pairs": pairs,
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
