"""A kernel's source, parsed once: what the harness's static readers read of it.

The runner parses a candidate once (`KernelSource.parse`) and hands the record to everything that
reads the source before or after the judge: the syntax check and the static findings
(static_checks.py), the audit's view of which kernels are the source's own and whether a fresh
process would tune anew (audit.py), and the judge's autotune choice written into the source
(autotune_choices.py). Each of them also takes a plain string, parsed then.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

from accelopt.tools import pyparse
from accelopt.tools.tunables import AutotuneSpace, autotune_space

_JIT_DECORATORS = {"triton.jit", "jit", "triton.autotune", "autotune", "triton.heuristics", "heuristics"}


def is_triton_jit(decorator: ast.expr) -> bool:
    """A decorator that makes a Triton kernel (or wraps one: autotune, heuristics)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in _JIT_DECORATORS


@dataclass(frozen=True, eq=False)
class KernelSource:
    """The text, its syntax tree (None where Python cannot parse it) and why not."""

    text: str
    tree: ast.Module | None = field(repr=False)
    syntax_error: str | None = None

    @classmethod
    def parse(cls, text: str) -> KernelSource:
        """The text's shared parse (pyparse.program): its tree is read, never changed."""
        try:
            return cls(text, pyparse.parsed(text))
        except SyntaxError as e:
            line = (e.text or "").strip()
            return cls(text, None, f"SyntaxError: {e.msg} (line {e.lineno}: {line})")

    @classmethod
    def of(cls, source: str | KernelSource) -> KernelSource:
        return source if isinstance(source, KernelSource) else cls.parse(source)

    @cached_property
    def functions(self) -> dict[str, ast.FunctionDef]:
        """Every function the module defines, nested ones too, by name."""
        return {} if self.tree is None else {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef)}

    @cached_property
    def triton_kernels(self) -> set[str]:
        """Names of the @triton.jit (autotune, heuristics) functions: what its GPU kernels are called."""
        return {name for name, fn in self.functions.items() if any(is_triton_jit(d) for d in fn.decorator_list)}

    @cached_property
    def autotune(self) -> AutotuneSpace | None:
        """Its @triton.autotune config list (tunables.autotune_space), or None."""
        return None if self.tree is None else autotune_space(self.tree)

    @property
    def tunes_at_run_time(self) -> bool:
        """An autotuner of several configurations: a fresh process that is not a sandbox (where the
        judge pins the choice) tunes anew, and may pick another configuration."""
        if self.autotune is None:
            return "triton.autotune(" in self.text
        return not self.autotune.pinned
