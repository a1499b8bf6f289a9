"""Where a FlashInfer-Bench dataset keeps things, and moving its blobs safely.

A Workload's safetensors path is relative to the dataset root (the TraceSet root that holds
definitions/, workloads/, blob/), as flashinfer-bench's loader and `validate` read it. A path
that leaves the root is refused, and a blob shared by several inputs is stored once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from accelopt.tools.task import TaskError

LAYOUT_DIRS = ("workloads", "traces", "definitions")


def dataset_root(workloads_path: Path, explicit: Path | None = None) -> Path:
    """The dataset root of a workloads file: `explicit` when given; else the folder above the
    layout folder the file sits in; a loose file's own folder otherwise."""
    if explicit is not None:
        if not explicit.is_dir():
            raise TaskError(f"dataset root not found: {explicit}")
        return explicit.resolve()
    path = workloads_path.resolve()
    # ROOT/workloads/<op>/x.jsonl, or the older ROOT/traces/workloads/<op>/x.jsonl: the outermost
    # layout folder among the nearest three, so that a loose file's far ancestors never count
    layout = [p for p in list(path.parents)[:3] if p.name in LAYOUT_DIRS]
    return layout[-1].parent if layout else path.parent


def definition_dataset_root(definition_path: Path) -> Path | None:
    """ROOT for ROOT/definitions/<op_type>/<name>.json, else None."""
    path = definition_path.resolve()
    if len(path.parents) > 2 and path.parents[1].name == "definitions":
        return path.parents[2]
    return None


def confined(root: Path, relative: str, what: str) -> tuple[Path, str]:
    """(the resolved file, its normalized path under root) for a dataset-relative path; a path
    that is absolute or leaves the root (through .. or a symlink) is refused."""
    if Path(relative).is_absolute():
        raise TaskError(f"{what}: safetensors path {relative} is absolute; FlashInfer-Bench paths are relative to "
                        f"the dataset root {root}: refused")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise TaskError(f"{what}: safetensors path {relative} resolves to {resolved}, outside the dataset root "
                        f"{root}: refused")
    return resolved, resolved.relative_to(root.resolve()).as_posix()


class BlobStore:
    """Places each distinct blob once under `root`: a hard link where the filesystem allows,
    else one copy; a second reference to the same blob is free."""

    def __init__(self, root: Path):
        self.root = root
        self.placed: dict[str, Path] = {}  # normalized relative path -> the source it came from

    def place(self, source: Path, relative: str) -> Path:
        dst = self.root / relative
        known = self.placed.get(relative)
        if known is not None:
            if known != source:
                raise TaskError(f"two different blobs for {relative}: {known} and {source}")
            return dst
        self.placed[relative] = source
        if dst.exists():
            if dst.stat().st_size != source.stat().st_size:
                raise TaskError(f"{dst} exists and differs from {source}: refusing to overwrite a blob")
            return dst
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, dst)
        except OSError:  # another filesystem, or links not allowed
            shutil.copyfile(source, dst)
        return dst
