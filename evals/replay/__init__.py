"""accelopt's replay endpoint: an OpenAI-compatible server for rehearsing a run. A REHEARSAL,
NOT AN LLM.

It answers every role of an accelopt run (planner, executor, fixer, summarizer) with real
material for one task (LLM-written kernels from evals/realworld, mechanical variants of them,
realistic failures, plan texts and lessons), at the speed and token counts of a stated model of
a served LLM (latency.py), so that a configuration's wall time and GPU cost can be rehearsed
before tokens are paid for. It never reads what a prompt asks beyond which role asks: it cannot
flatter the optimizer, and says nothing about how good a real model's kernels would be. It
serves one model id, `replay`.

    python -m accelopt.evals.replay --task evals/realworld/tasks/rmsnorm_h128
    accelopt optimize TASK --model vllm:replay --base-url http://127.0.0.1:PORT/v1 ...

or in code: `with ReplayServer(task_dir, seed=0, time_scale=1) as server: ... server.url ...`.
"""

from accelopt.evals.replay.latency import PROFILES, LatencyModel, Profile
from accelopt.evals.replay.server import MODEL_ID, NOTE, ReplayServer

__all__ = ["MODEL_ID", "NOTE", "PROFILES", "LatencyModel", "Profile", "ReplayServer"]
