"""The memory's embedding model made small enough to carry to a GPU host that cannot download it.

A GPU benchmark with a memory (bench_self_improvement.py's warm phase) needs all-MiniLM-L6-v2
where the runs are, and a lent GPU machine may reach no registry and take 64 MiB a call. The
model's 87 MiB of fp32 weights become a 22.7 MiB folder: every 2-D weight as int8 with one fp32 scale per row
(its largest magnitude / 127), 1-D weights (biases, LayerNorm) as they are, the tokenizer and
configuration files copied. Unpacked on the other side into a model folder for `--embedder DIR`;
its embeddings stay within cosine 0.999 of the fp32 model's (tests/integration/test_pack_embedder.py).

    python evals/pack_embedder.py pack carry/minilm                  # here: the installed default model
    python evals/pack_embedder.py unpack carry/minilm /tmp/minilm    # there: then --embedder /tmp/minilm
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"
PACKED = "model.int8.safetensors"
SCALE = ".row_scale"  # suffix of a quantized weight's per-row scales


def default_model_dir() -> Path:
    from accelopt.memory.embedder import DEFAULT_EMBEDDER, model_path

    return Path(model_path(DEFAULT_EMBEDDER))


def pack(model_dir: Path, out: Path) -> Path:
    """out/ holds the packed weights and every other file of the model folder; returns out."""
    shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns(WEIGHTS, "*.md", ".git*"), dirs_exist_ok=True)
    packed: dict[str, torch.Tensor] = {}
    for name, weight in load_file(str(model_dir / WEIGHTS)).items():
        if weight.dim() == 2 and weight.is_floating_point():
            scale = weight.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            packed[name] = (weight.float() / scale).round().to(torch.int8)
            packed[name + SCALE] = scale
        else:
            packed[name] = weight
    save_file(packed, str(out / PACKED))
    return out


def unpack(packed_dir: Path, out: Path) -> Path:
    """A model folder sentence-transformers loads (fp32 weights again); returns out."""
    shutil.copytree(packed_dir, out, ignore=shutil.ignore_patterns(PACKED), dirs_exist_ok=True)
    packed = load_file(str(packed_dir / PACKED))
    weights = {name: (t.float() * packed[name + SCALE]) if name + SCALE in packed else t
               for name, t in packed.items() if not name.endswith(SCALE)}
    save_file(weights, str(out / WEIGHTS))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="model folder -> packed folder")
    packing.add_argument("out", type=Path)
    packing.add_argument("--model", type=Path, default=None, help="a sentence-transformers folder (default: MiniLM)")
    unpacking = commands.add_parser("unpack", help="packed folder -> model folder")
    unpacking.add_argument("packed", type=Path)
    unpacking.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        done = pack(args.model or default_model_dir(), args.out)
    else:
        done = unpack(args.packed, args.out)
    size = sum(p.stat().st_size for p in done.rglob("*") if p.is_file())
    print(f"{done}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
