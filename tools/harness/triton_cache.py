"""A Triton cache carried from one process's folder to another's. Standard library only: the
judge (run as a script) loads this file by path.

A candidate's kernels, compiled once in its sandbox (or ahead of its turn, compile_ahead.py), are
used again by its sandbox, its re-check on fresh inputs and its audit, each in a folder of its own.
The cache was written by candidate code, so it is read as untrusted: only regular files with one
name are copied, two levels deep (key/name) as Triton lays them out, opened without following a
link. A symbolic or hard link planted there would otherwise make the harness, which may read
what the candidate may not, copy the file it names into a folder the candidate's next process
reads. Triton 3.x before 3.7 records a kernel's files in a group file by absolute path
(`__grp__*.json`: {"child_paths": {name: path}}), and treats a group whose paths are gone as a
miss: the copy's group files are rewritten to point into the copy. Newer Tritons record names only
(a list), which need nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil

_KEY_DIR = re.compile(r"[A-Za-z0-9_-]{1,128}")
_FILE = re.compile(r"[A-Za-z0-9_.+-]{1,200}")


def copy_files(source: str, destination: str, max_bytes: int | None = None) -> list[str] | None:
    """Copy the cache at `source` into `destination`; returns the names (key/name) of the files
    `destination` now holds from `source`, or None where `source` cannot be read. A file already
    there is left alone: a running process may have it mapped (its compiled C launcher; overwritten
    in place, the process that loaded it crashed at its next call, exit code 11 on an H100). Past
    `max_bytes` copied, the rest is left out (compiled again where needed)."""
    try:
        keys = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return None
    held, copied, total = [], [], 0
    for key in keys:
        if not key.is_dir(follow_symlinks=False) or not _KEY_DIR.fullmatch(key.name):
            continue  # tmp.pid_* of a write cut short, links, anything odd
        for entry in sorted(os.scandir(key.path), key=lambda e: e.name):
            if not entry.is_file(follow_symlinks=False) or not _FILE.fullmatch(entry.name):
                continue
            info = entry.stat(follow_symlinks=False)
            if info.st_nlink != 1 or (max_bytes is not None and total + info.st_size > max_bytes):
                continue  # a hard link may name a file from outside; Triton writes each file once
            target = os.path.join(destination, key.name, entry.name)
            if not os.path.lexists(target):
                try:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as src, open(target, "xb") as dst:
                        shutil.copyfileobj(src, dst)
                except OSError:
                    continue
                total += info.st_size
                copied.append(target)
            held.append(f"{key.name}/{entry.name}")
    for path in copied:
        if os.path.basename(path).startswith("__grp__"):
            _repoint(path, destination)
    return held


def copy(source: str, destination: str) -> bool:
    """copy_files, told as whether there was a cache to copy (False: compiled again)."""
    return copy_files(source, destination) is not None


def _repoint(group_file: str, root: str) -> None:
    """A kernel's file lives at <cache>/<key>/<name>: keep the last two parts, under `root`."""
    try:
        with open(group_file) as f:
            group = json.load(f)
        paths = group.get("child_paths")
        if not isinstance(paths, dict):
            return
        group["child_paths"] = {name: os.path.join(root, *str(path).split(os.sep)[-2:]) for name, path in paths.items()}
        with open(group_file, "w") as f:
            json.dump(group, f)
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # a group that cannot be read is a miss: that kernel is compiled again
