"""Every Python block of the documentation runs as written.

The blocks are read out of the Markdown files' fences (```python, ```py, ~~~python; any fence
length), never copied here. A block that is not meant to run (a fragment, a session's output)
says so in its fence's info string: ```python no-run. Every other block is run as written, each
in a namespace of its own and a folder of its own that holds a copy of the bundled tasks (the
snippets name `evals/tasks/...` relative to the repository), in a fresh Python process, against
a scripted OpenAI-compatible server on 127.0.0.1 that the snippets reach through the variables
they read (ACCELOPT_MODEL, ACCELOPT_BASE_URL); the default memory lands under a temporary
XDG_DATA_HOME."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, TASKS
from tests.integration.test_message_stream import StreamingServer

pytestmark = pytest.mark.slow

PYTHON = {"python", "py", "python3"}
NO_RUN = "no-run"
MODEL = "vllm:scripted/doc-model"  # what ACCELOPT_MODEL names: the server must see it, not the default


def doc_files() -> list[Path]:
    """The documentation a user reads: the top-level Markdown files, docs/ (if any), and the
    READMEs of the evaluation folders."""
    found = {*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("evals/*/README.md")}
    return sorted(found)


@dataclass(frozen=True)
class Block:
    doc: str      # the file, relative to the repository
    line: int     # of the opening fence, 1-based
    info: str     # the fence's info string: language, then words such as no-run
    code: str

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    @property
    def runs(self) -> bool:
        return NO_RUN not in self.info.split()[1:]

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_CLOSE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*$")


def fenced_blocks(text: str, doc: str = "") -> list[Block]:
    """The fenced code blocks of a Markdown text, as CommonMark reads them: a block closes at a
    fence of the same character at least as long as its opening one (or at the end of the text),
    and its lines lose the opening fence's indentation."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None or (opened["fence"][0] == "`" and "`" in opened["info"]):
            i += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        body, j = [], i + 1
        while j < len(lines):
            closed = _CLOSE.match(lines[j])
            if closed and closed["fence"][0] == fence[0] and len(closed["fence"]) >= len(fence):
                break
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip())):])
            j += 1
        blocks.append(Block(doc, i + 1, opened["info"].strip(), "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def python_blocks() -> list[Block]:
    return [b for path in doc_files()
            for b in fenced_blocks(path.read_text(), str(path.relative_to(ROOT))) if b.language in PYTHON]


# ---------------------------------------------------------------- reading the fences

def test_the_fences_are_read_as_markdown_reads_them():
    text = textwrap.dedent("""\
        Intro.

        ```python
        print("one")
        ```

        ````py no-run
        ```python
        not closed by the shorter fence
        ```
        ````

        - a list item:

          ~~~python
          x = 1
          ~~~

        ```bash
        echo no
        ```

        ``` python
        tail = True
        """)
    blocks = fenced_blocks(text, "t.md")
    assert [(b.line, b.language, b.runs) for b in blocks] == [
        (3, "python", True), (7, "py", False), (15, "python", True), (19, "bash", True), (23, "python", True)]
    assert blocks[0].code == 'print("one")\n'
    assert blocks[1].code == '```python\nnot closed by the shorter fence\n```\n'
    assert blocks[2].code == "x = 1\n"  # the list item's indentation is not the code's
    assert blocks[4].code == "tail = True\n"  # an unclosed fence runs to the end


def test_the_documented_examples_are_found():
    """The README's programmatic run and its message stream are among the blocks that run."""
    runnable = [b for b in python_blocks() if b.runs]
    assert any("graph.invoke(" in b.code and b.doc == "README.md" for b in runnable)
    assert any("graph.stream(" in b.code and 'stream_mode="messages"' in b.code and b.doc == "README.md"
               for b in runnable)


# ---------------------------------------------------------------- running them

RUNNER = r'''
import contextlib, io, json, os, sys, traceback

blocks = json.loads(sys.argv[1])
results = {}
for block in blocks:
    os.chdir(block["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(block["code"], block["name"], "exec"), {"__name__": "__main__"})
            ok = True
        except BaseException:  # a snippet that raises (or exits) did not run as written
            traceback.print_exc()
            ok = False
    results[block["name"]] = {"ok": ok, "stdout": out.getvalue(), "stderr": err.getvalue()}
with open(sys.argv[2], "w") as f:
    json.dump(results, f)
'''


def _reply(messages) -> str:
    """A model for any bundled task: one plan; the kernel it was shown, rewritten in a comment;
    a lesson in JSON."""
    system, prompt = str(messages[0].content), str(messages[-1].content)
    role = re.search(r"You are the accelopt (\w+)", system).group(1)
    if role == "planner":
        return "### Plan 1: more warps\nLaunch the kernel with 8 warps to raise memory parallelism.\n"
    if role in ("executor", "fixer"):
        shown = re.search(r"^## (?:Current kernel|Kernel[^\n]*)\n```python\n(.*?)\n```", prompt, re.S | re.M)
        assert shown is not None, prompt[:2000]
        return f"The kernel:\n\n```python\n{shown.group(1)}\n# rewritten\n```\n"
    return json.dumps({"title": "warps", "lesson": "More warps.", "bottleneck": "memory", "kernel_class": "row",
                       "before": "num_warps=4", "after": "num_warps=8"})


def test_every_python_block_runs_as_written(tmp_path):
    blocks = python_blocks()
    runnable = [b for b in blocks if b.runs]
    assert runnable, "no Python block in the documentation"
    jobs = []
    for n, block in enumerate(runnable):
        cwd = tmp_path / f"block{n}"
        shutil.copytree(TASKS, cwd / "evals" / "tasks")
        jobs.append({"name": block.name, "code": block.code, "cwd": str(cwd)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELOPT_") or k == "ACCELOPT_UNCONFINED"}
    results_file = tmp_path / "results.json"
    with StreamingServer(_reply) as server:
        env.update(ACCELOPT_MODEL=MODEL, ACCELOPT_BASE_URL=server.url, XDG_DATA_HOME=str(tmp_path / "data"))
        proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(jobs), str(results_file)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(results_file.read_text())

    # every block not marked no-run was run, and ran
    assert set(results) == {b.name for b in runnable}
    failed = {name: r["stderr"][-3000:] for name, r in results.items() if not r["ok"]}
    assert not failed, json.dumps(failed, indent=1)

    # a snippet that runs the graph reached the scripted model through the variables it reads: its
    # run wrote the executor's kernel (a run whose model is out of reach ends quietly at the baseline)
    runs_graph = [(n, b) for n, b in enumerate(runnable) if re.search(r"graph\.(a?invoke|a?stream)\(", b.code)]
    if runs_graph:
        assert server.requests and {r["body"]["model"] for r in server.requests} == {MODEL.split(":", 1)[1]}
    for n, block in runs_graph:
        written = list((tmp_path / f"block{n}" / "runs").glob("*/candidates/i1.m0.p0.k0/kernel.py"))
        assert written and "# rewritten" in written[0].read_text(), block.name
    for block in runnable:
        out = results[block.name]["stdout"]
        if "graph.invoke(" in block.code:
            assert "def run(" in out, out[-2000:]  # the best kernel's source
        if 'stream_mode="messages"' in block.code:
            assert "--- planner" in out and "--- executor i1.m0.p0.k0" in out, out[-2000:]
            assert "# rewritten" in out  # the executor's reply, streamed
