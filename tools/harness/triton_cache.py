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


def copy(source: str, destination: str, *, kernels: bool = True) -> bool:
    """Copy the cache at `source` into `destination` (merged with what is there), its group files
    pointing into `destination`. `kernels=False` leaves the kernels' group files out (kernels are
    compiled again; the compiled C launchers are still used). False where nothing was copied."""
    ignore = None if kernels else shutil.ignore_patterns("__grp__*")
    try:
        shutil.copytree(source, destination, dirs_exist_ok=True, ignore=ignore)
    except OSError:
        return False
    for folder, _dirs, files in os.walk(destination):
        for name in files:
            if name.startswith("__grp__"):
                _repoint(os.path.join(folder, name), destination)
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
