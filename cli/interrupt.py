"""Ctrl-C during a run: one line with the command that continues it, exit 130, no process left.

LangGraph waits for the nodes in flight before an interrupt reaches the caller, and a node may
be in a minutes-long evaluation or model call. So while a run is driven, SIGINT is handled
here: the runs still open in a LangSmith trace are ended as "interrupted" and sent (a few
seconds at most: tools/tracing.end_open_runs; a second Ctrl-C skips it), the line is printed,
the judges (and with them their sandboxes) are killed, and the process ends at once, as after
`kill -9`, which a run survives by design (the checkpoint and the run's caches hold every
finished step; the steps in flight are redone on resume). Killing and exiting happen without a
thread switch between them, so no evaluation cut off by the kill is recorded as the kernel's
failure: the traces are sent before the kill.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.text import Text

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C


def resume_command(run_dir: Path) -> str:
    return shlex.join(["accelopt", "resume", str(run_dir)])


def rerun_command(out: Path) -> str:
    """This `accelopt eval` command line, with its --out (rerunning it resumes the suite)."""
    args = sys.argv[1:]
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args = [*args, "--out", str(out)]
    return shlex.join(["accelopt", *args])


@contextmanager
def continue_hint_on_interrupt(command: str, console: Console) -> Iterator[None]:
    """While the block runs, Ctrl-C prints 'interrupted: continue with `COMMAND`' and exits 130."""
    from accelopt.tools.harness.pool import kill_judges_now  # imported now, not inside the handler
    from accelopt.tools.tracing import end_open_runs

    interrupted = False

    def handler(signum: int, frame: object) -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C while the traces are sent: out at once
            kill_judges_now()
            os._exit(INTERRUPTED)
        interrupted = True
        try:
            try:  # before any line: the live display redraws meanwhile
                traces = end_open_runs("interrupted")
            except Exception:  # noqa: BLE001 - the traces never cost the line that says how to resume
                traces = None
            console.show_cursor(True)  # a live progress display hides it
            console.file.write("\n")
            err = Console(stderr=True)
            err.print(Text.assemble(("interrupted", "bold yellow"), f": continue with `{command}`"), soft_wrap=True,
                      highlight=False)
            if traces:
                err.print(traces, soft_wrap=True, highlight=False, markup=False)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            kill_judges_now()
            os._exit(INTERRUPTED)

    if sys.platform == "win32":  # pragma: no cover - the harness is POSIX only
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
