"""Problems of a KernelBench checkout by level and problem id, as KernelBench numbers them
(`KernelBench/level1/19_ReLU.py` is level 1, problem 19), and whole levels as one suite folder."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from accelopt.tools.task import TaskError


def levels_root(repo: str | Path) -> Path:
    """The folder holding level1/, level2/, ...: `<checkout>/KernelBench`, or that folder itself."""
    repo = Path(repo)
    for root in (repo / "KernelBench", repo):
        if any(root.glob("level[0-9]*")):
            return root
    raise TaskError(f"{repo} is not a KernelBench checkout: no KernelBench/level1, level2, ... folders")


def _number(path: Path) -> int | None:
    match = re.match(r"(\d+)_", path.name)
    return int(match.group(1)) if match else None


def level_problems(repo: str | Path, level: int) -> list[Path]:
    """The problem files of one level, by problem id."""
    folder = levels_root(repo) / f"level{level}"
    if not folder.is_dir():
        have = sorted(p.name for p in levels_root(repo).glob("level[0-9]*"))
        raise TaskError(f"no level {level} in {levels_root(repo)} (have: {', '.join(have)})")
    files = [p for p in folder.glob("*.py") if _number(p) is not None]
    return sorted(files, key=lambda p: _number(p) or 0)


def problem_file(repo: str | Path, level: int, problem_id: int) -> Path:
    found = [p for p in level_problems(repo, level) if _number(p) == problem_id]
    if not found:
        ids = [n for p in level_problems(repo, level) if (n := _number(p)) is not None]
        span = f"{min(ids)}..{max(ids)}" if ids else "none"
        raise TaskError(f"level {level} has no problem {problem_id} (ids {span})")
    if len(found) > 1:
        raise TaskError(f"level {level} has {len(found)} files for problem {problem_id}: "
                        f"{', '.join(p.name for p in found)}")
    return found[0]


def task_name(problem: Path, level: int) -> str:
    """`level1_19_ReLU`: unique across levels, sorted by level then file name."""
    return f"level{level}_{problem.stem}"


@dataclass
class LevelImport:
    suite: Path
    imported: list[Path] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # problem file name -> one-line reason


def import_level(repo: str | Path, level: int, out_dir: str | Path, *, dtype: str = "float32",
                 limit: int | None = None, problem_ids: set[int] | None = None, progress=None) -> LevelImport:
    """Every problem of a level (or those of `problem_ids`) into one suite folder (a task folder
    each); a problem that cannot be imported is recorded with its reason, the others go on."""
    from accelopt.evals.interop.kernelbench import import_problem

    result = LevelImport(suite=Path(out_dir))
    problems = [p for p in level_problems(repo, level) if problem_ids is None or _number(p) in problem_ids]
    for problem in problems[:limit]:
        name = task_name(problem, level)
        try:
            result.imported.append(import_problem(problem, result.suite / name, dtype=dtype, name=name))
        except TaskError as e:
            result.failures[problem.name] = str(e)
            _remove_partial(result.suite / name)
        if progress is not None:
            progress(problem, result.failures.get(problem.name))
    record = {"format": "kernelbench", "repo": str(Path(repo).resolve()), "level": level,
              "imported": [p.name for p in result.imported], "not_imported": result.failures}
    result.suite.mkdir(parents=True, exist_ok=True)
    (result.suite / "kernelbench_import.json").write_text(json.dumps(record, indent=2) + "\n")
    return result


def _remove_partial(task_dir: Path) -> None:
    """A problem that failed leaves no half-written task for `accelopt eval` to trip on."""
    if task_dir.is_dir() and not (task_dir / "task.json").is_file():
        shutil.rmtree(task_dir, ignore_errors=True)
