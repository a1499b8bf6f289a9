"""80 columns, read from a real terminal: the CLI run under a pseudo-terminal whose window is 80
columns wide (no COLUMNS or LINES in its environment: rich and typer ask the terminal), every line
of what it drew measured in cells (µ, ✓ and the box characters included).

`check`'s table breaks no word (`kernel-onl` / `y µs`, `interprete` / `r_wall`) and its wrapped
lines keep an indent; `--help` cuts no option name (`--learn-from-interpre…`), splits no metavar and
keeps no docstring's hard line breaks; the live lines of `optimize` fit the terminal (they ran to
95-258 columns), while in a pipe (a log) each stays whole on one line."""

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
import typer
from rich.cells import cell_len
from rich.console import Console

from tests.conftest import ROOT

WIDTH = 80
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def in_terminal(*args: str, columns: int = WIDTH, timeout: float = 120) -> tuple[int, list[str]]:
    """`python -m accelopt ARGS` with a pty of `columns` as its stdin, stdout and stderr: its exit
    code and the lines it drew, escapes stripped (each redraw of the live bar is a line of its own)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    env.update(TERM="xterm-256color", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "accelopt", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=ROOT, env=env, start_new_session=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail(f"accelopt {' '.join(args)}: still running after {timeout} s")
    finally:
        os.close(master)
    code = proc.wait()
    text = _ESCAPE.sub("", out.decode("utf-8", "replace")).replace("\r\n", "\n")
    return code, [segment.rstrip() for line in text.split("\n") for segment in line.split("\r")]


def _within(lines: list[str], columns: int = WIDTH) -> None:
    for line in lines:
        assert cell_len(line) <= columns, f"{cell_len(line)} columns: {line!r}\n" + "\n".join(lines)
        assert "…" not in line, f"cut: {line!r}\n" + "\n".join(lines)


# ---------------------------------------------------------------- check

def test_check_breaks_no_word_and_indents_what_wraps_at_80_columns():
    code, lines = in_terminal("check", "evals/tasks/softmax", "evals/tasks/softmax/baseline.py", "--device", "cpu")
    text = "\n".join(lines)
    assert code == 0, text
    _within(lines)
    printed = [line for line in lines if line.strip()]
    assert printed[0].startswith("verified  evals/tasks/softmax/baseline.py"), text
    # the table: every header word and cell whole (a header wraps at its blank: `kernel-only` over `µs`)
    rows = [line for line in printed if line[0] in "┃│"]
    assert rows, text
    words = {w for row in rows for w in row.replace("┃", " ").replace("│", " ").split()}
    allowed = {"workload", "median", "IQR", "metric", "kernel-only", "events", "%", "peak", "µs", "-",
               "interpreter_wall"}
    split = [w for w in words if w not in allowed and not re.fullmatch(r"[\d.,]+|M\d+_N\d+", w)]
    assert split == [], text
    assert "interpreter_wall" in words and "workload" in words, text
    # nothing but the verdict's line starts at column 0: a wrapped line keeps its indent
    assert [line for line in printed[1:] if not line.startswith(" ") and line[0] not in "┏┃┡│└"] == [], text
    evidence = next(i for i, line in enumerate(printed) if line.startswith("  evidence: "))
    continued = [line for line in printed[evidence + 1:] if not line.lstrip().startswith("evidence:")][:1]
    assert continued and continued[0].startswith(" " * 4), text


# ---------------------------------------------------------------- --help

def _commands():
    from accelopt.cli.app import app

    def walk(command, path):
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def _ragged(lines: list[str]) -> list[str]:
    """Lines broken before the terminal needed it (a docstring's hard line break): the next line's
    first word would have fit on this one. Read in the help's text block (under Usage) and in each
    Commands panel's description column."""
    found = []
    text, i = [], 0
    while i < len(lines) and not lines[i].startswith("╭"):  # the text above the first panel
        text.append(lines[i])
        i += 1
    for a, b in zip(text, text[1:]):
        if a.strip() and b.strip() and not b.strip().startswith("Usage"):
            if cell_len(a.rstrip()) + 1 + cell_len(b.split()[0]) <= WIDTH - 2:
                found.append(f"{a!r} / {b!r}")
    panel: list[str] | None = None
    for line in lines:
        if line.startswith("╭") and "Commands" in line:
            panel = []
        elif line.startswith("│") and panel is not None:
            panel.append(line[1:].rstrip().rstrip("│"))
        elif line.startswith("╰") and panel:
            start = len(panel[0]) - len(panel[0].lstrip()) + len(panel[0].split()[0])
            start += len(panel[0][start:]) - len(panel[0][start:].lstrip())  # the description column
            room = WIDTH - 2 - start - 1
            for a, b in zip(panel, panel[1:]):
                if not b[:start].strip():  # a continuation of the row above
                    if cell_len(a[start:].rstrip()) + 1 + cell_len(b.split()[0]) <= room:
                        found.append(f"{a.strip()!r} / {b.strip()!r}")
            panel = None
    return found


@pytest.mark.parametrize("path", [path for path, _ in _commands()], ids=lambda p: " ".join(p) or "accelopt")
def test_help_names_every_option_whole_and_wraps_at_words_at_80_columns(path):
    command = dict((tuple(p), c) for p, c in _commands())[tuple(path)]
    code, lines = in_terminal(*path, "--help")
    text = "\n".join(lines)
    assert code == 0, text
    _within(lines)
    flat = " ".join(text.replace("│", " ").split())
    for param in command.params:
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("--"):  # whole, on one line (not `--learn-from-interpre…`, not folded)
                assert any(re.search(rf"(^|[\s,/]){re.escape(name)}($|[\s,])", line) for line in lines), (name, text)
    # each metavar of choices on one line: `<default|max-autotune-no-cudagraphs>`, not `<default|max-aut`
    opened = [m for line in lines for m in re.findall(r"<[\w|.-]+>?", line) if "|" in m and not m.endswith(">")]
    assert opened == [], text
    if command.help:  # the first sentence, whole (rewrapped, not cut)
        first = " ".join(command.help.split("\n\n")[0].split())
        assert first.split(". ")[0] in flat, text
    assert _ragged(lines) == [], text


# ---------------------------------------------------------------- the live lines of optimize

@pytest.mark.slow
def test_optimize_live_lines_fit_an_80_column_terminal(tmp_path):
    code, lines = in_terminal("optimize", "evals/tasks/rmsnorm", "-B", "1", "-N", "2", "-K", "1", "-F", "0", "-T", "1",
                              "--device", "cpu", "--no-memory", "--run-dir", str(tmp_path / "run"), timeout=300)
    text = "\n".join(lines)
    assert code == 0, text
    live = lines[:next(i for i, line in enumerate(lines) if line.startswith("accelopt run:"))]
    _within(live)  # (after it, the next steps: commands printed whole, to paste)
    flat = " ".join(" ".join(live).split())
    assert "✓ baseline verified" in flat and "iteration 1/1 done: beam head" in flat, text
    assert "(baseline not counted)" in flat and "ranks" in flat, text  # the long lines, wrapped, not cut
    # a wrapped line goes on indented: the rule said once under the baseline runs over several lines
    rule = next(i for i, line in enumerate(live) if line.startswith("  CPU interpreter: "))
    assert live[rule + 1].startswith("    "), text


def _long_candidate_run(console: Console) -> None:
    from accelopt.graph.progress import LiveDisplay
    from accelopt.nodes.context import RunContext

    ctx = RunContext(beams=1, plans=1, samples=1, fixes=0, iterations=1, device="cpu", model="tuner",
                     use_memory=False)
    cand = {"id": "i1.m0.p0.k0", "status": "verified", "speedup": 1.02, "timer": "cuda_event",
            "parent_id": "baseline", "speedup_vs_parent": 1.01, "node": "gpu-node-with-a-long-name-7",
            "plan_title": "Fuse the reduction and the normalization into one pass over each row"}
    with LiveDisplay(console, ctx) as display:
        display.feed(("candidate:a",), "updates", {"profiler": {"candidates": {cand["id"]: cand}}})


def test_live_lines_wrap_with_an_indent_in_a_terminal_and_stay_whole_in_a_pipe():
    """The same candidate line: in a terminal of 80 columns, wrapped at words with its continuation
    under the id; piped (a log), one line however long, as before."""
    out = io.StringIO()
    _long_candidate_run(Console(file=out, width=WIDTH, force_terminal=False))
    whole = [line for line in out.getvalue().splitlines() if "i1.m0.p0.k0" in line]
    assert len(whole) == 1 and cell_len(whole[0]) > WIDTH and whole[0].rstrip().endswith("row"), out.getvalue()

    out = io.StringIO()
    _long_candidate_run(Console(file=out, width=WIDTH, force_terminal=True, color_system=None))
    lines = [_ESCAPE.sub("", line).split("\r")[-1].rstrip() for line in out.getvalue().splitlines()]
    start = next(i for i, line in enumerate(lines) if "i1.m0.p0.k0" in line)
    end = next(i for i, line in enumerate(lines) if line.rstrip().endswith("row"))
    wrapped = lines[start:end + 1]
    assert len(wrapped) >= 3, lines
    _within(wrapped)
    assert all(line.startswith("    ") and not line.startswith("     ") for line in wrapped[1:]), wrapped
    assert " ".join(" ".join(wrapped).split()).count("Fuse the reduction and the normalization into one pass over each row") == 1, wrapped
