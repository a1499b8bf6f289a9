"""The counted-loop rewrite: a `while` loop that counts up by a fixed step is made a `for` loop
over a range.

Why: Triton software-pipelines `for` loops only (`num_stages`: the loads that feed a `tl.dot`
issued stages ahead); a `while` loop runs each iteration's loads, then waits. LLM-written kernels
count with `while` often: of the FlashInfer-Bench solutions in `evals/realworld/`, o3's and gpt-5's
gqa_paged_decode, gpt-5's mla prefill and gpt-5's gemm_n6144_k4096 (whose K loop feeds its dot).
The loops the other rewrites take (split_kv) are `for` loops too. Made mechanically:

    offset = tl.zeros([], tl.int32)         offset = tl.zeros([], tl.int32)
    while offset < n:                 ->    for offset in range(offset, n, STEP):
        <body>                                  <body>
        offset += STEP

where the counter is assigned nowhere else in the body and read nowhere after the loop, the bound
and the step change nowhere in the body, the step is a positive literal or a `tl.constexpr`
parameter (a loop `while x < n` that terminates counts up), and the body has no `break`,
`continue` or `return`. Refused otherwise, and for kernels under @triton.autotune or
@triton.heuristics only where their configs are untouched (this rewrite keeps the signature).
"""

from __future__ import annotations

import ast
import copy

from accelopt.policies.kernel_ast import Refused, kernel_span, loaded, names, plain_kernels, stored, triton_module
from accelopt.tools.tunables import splice


def counted_loops(source: str) -> str | None:
    """The module with every counting `while` loop of its kernels made a `for` loop; None where
    there is none."""
    tree = triton_module(source)
    if tree is None:
        return None
    edits: list[tuple[int, int, int, int, str]] = []
    for fn in plain_kernels(tree, autotuned=True):
        constexprs = {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
        written = copy.deepcopy(fn)  # line numbers kept: "read after the loop" is decided by them
        rewriter = _Counted(written, constexprs)
        new = rewriter.visit(written)
        if rewriter.count:
            edits.append((*kernel_span(source, fn), ast.unparse(ast.fix_missing_locations(new))))
    return splice(source, edits) if edits else None


class _Counted(ast.NodeTransformer):
    def __init__(self, fn: ast.FunctionDef, constexprs: set[str]):
        self.fn, self.constexprs, self.count = fn, constexprs, 0

    def visit_While(self, node: ast.While) -> ast.stmt:
        self.generic_visit(node)
        try:
            counter, bound, step = self._counting(node)
        except Refused:
            return node
        self.count += 1
        loop = ast.For(ast.Name(counter, ast.Store()),
                       ast.Call(ast.Name("range", ast.Load()), [ast.Name(counter, ast.Load()), bound, step], []),
                       node.body[:-1], [])
        return ast.copy_location(loop, node)

    def _counting(self, node: ast.While) -> tuple[str, ast.expr, ast.expr]:
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Lt)
                and isinstance(test.left, ast.Name)) or node.orelse:
            raise Refused("not `while counter < bound`")
        counter, bound = test.left.id, test.comparators[0]
        last = node.body[-1]
        if isinstance(last, ast.AugAssign) and isinstance(last.op, ast.Add) and isinstance(last.target, ast.Name) \
                and last.target.id == counter:
            step = last.value
        elif isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name) \
                and last.targets[0].id == counter and isinstance(last.value, ast.BinOp) \
                and isinstance(last.value.op, ast.Add) and isinstance(last.value.left, ast.Name) \
                and last.value.left.id == counter:
            step = last.value.right
        else:
            raise Refused("the loop does not end by counting up")
        rest = node.body[:-1]
        if counter in stored(rest) or (names(bound) | names(step)) & stored(node.body):
            raise Refused("the counter, bound or step changes in the body")
        if not (isinstance(step, ast.Constant) and type(step.value) is int and step.value > 0
                or isinstance(step, ast.Name) and step.id in self.constexprs):
            raise Refused("a step that is not known to be positive")
        if any(isinstance(n, ast.Break | ast.Continue | ast.Return) for s in rest for n in ast.walk(s)):
            raise Refused("a loop left early")
        after = [n for n in ast.walk(self.fn) if isinstance(n, ast.stmt) and n.lineno > (node.end_lineno or 0)]
        if counter in loaded(after):
            raise Refused("the counter read after the loop")
        return counter, bound, step
