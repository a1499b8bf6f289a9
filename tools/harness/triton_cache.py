"""A Triton cache carried from one process's folder to another's. Standard library only: the
judge (run as a script) loads this file by path.

A candidate's kernels, compiled once in its sandbox, are used again by its re-check on fresh
inputs and by its audit, each in a folder of its own. Triton 3.x before 3.7 records a kernel's
files in a group file by absolute path (`__grp__*.json`: {"child_paths": {name: path}}), and
treats a group whose paths are gone as a miss: copied as is, the cache compiles everything again.
The copy's group files are rewritten to point into the copy. Newer Tritons record names only
(a list), which need nothing.
"""

from __future__ import annotations

import json
import os
import shutil


def copy(source: str, destination: str) -> bool:
    """Copy the cache at `source` into `destination`, its group files pointing into
    `destination`. A file already there is left alone: a running process may have it mapped (its
    compiled C launcher; overwritten in place, the process that loaded it crashed at its next
    call, exit code 11 on an H100). False where nothing was copied (then compiled again)."""
    copied: list[str] = []

    def copy_new(src: str, dst: str) -> str:
        if not os.path.exists(dst):
            shutil.copy2(src, dst)
            copied.append(dst)
        return dst

    try:
        shutil.copytree(source, destination, dirs_exist_ok=True, copy_function=copy_new)
    except (OSError, shutil.Error):
        return False
    for path in copied:
        if os.path.basename(path).startswith("__grp__"):
            _repoint(path, destination)
    return True


def _repoint(group_file: str, root: str) -> None:
    """A kernel's file lives at <cache>/<key>/<name>: keep the last two parts, under `root`."""
    try:
        with open(group_file) as f:
            group = json.load(f)
        paths = group.get("child_paths")
        if not isinstance(paths, dict):
            return
        group["child_paths"] = {name: os.path.join(root, *path.split(os.sep)[-2:]) for name, path in paths.items()}
        with open(group_file, "w") as f:
            json.dump(group, f)
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # a group that cannot be read is a miss: that kernel is compiled again
