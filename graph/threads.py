"""How many of a superstep's tasks run at once: all of them.

LangGraph runs a superstep's tasks on a thread pool of min(32, cores + 4) threads unless the run's
config sets `max_concurrency` (langchain_core's `get_executor_for_config`), and an async run's
sync nodes on the event loop's default executor, sized the same way. A kernel branch waits on a
model server or on its judge's GPU lease, not on a core: on a 2-core machine 16 branches called
their model 6 at a time, in three waves, and a 16-core one caps B2 N4 K2 under `--schedule
pipeline` (16 executors, the planners ahead, the pending fixes) at 20. Evaluations stay bounded
by the judge pool and its lease, whatever this allows.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

MAX_CONCURRENCY = 256  # a superstep holds at most 2 x B x N x K kernel branches, B planners and the lessons: 35 at AccelOpt's shape


def widen_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's default executor, which an async run's sync nodes use, as wide as MAX_CONCURRENCY
    (`langgraph dev` runs graphs on its server's loop; a server started with isolated run loops,
    BG_JOB_ISOLATED_LOOPS, gives those loops its own executor instead)."""
    loop.set_default_executor(ThreadPoolExecutor(max_workers=MAX_CONCURRENCY, thread_name_prefix="accelopt-graph"))
