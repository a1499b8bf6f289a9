"""python -m accelopt.evals.replay --task DIR: the replay server from a terminal. A REHEARSAL,
NOT AN LLM (see __init__.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading

from accelopt.evals.replay.latency import PROFILES
from accelopt.evals.replay.server import MODEL_ID, NOTE, ReplayServer

DESCRIPTION = (
    "The accelopt replay server: an OpenAI-compatible endpoint that answers every role of an accelopt run with "
    "real material for one task (LLM-written kernels, variants of them, realistic failures, plan texts, lessons) "
    "at a modelled speed, to rehearse a configuration's wall time and GPU cost before paying for tokens. "
    "IT IS A REHEARSAL, NOT AN LLM: it serves its material whatever a prompt asks, and its model id is "
    f"'{MODEL_ID}'. Stats: GET /replay/stats.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m accelopt.evals.replay", description=DESCRIPTION)
    p.add_argument("--task", required=True, help="the accelopt task folder whose kernels are served, e.g. "
                                                 "evals/realworld/tasks/rmsnorm_h128")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="the port (default 0: a free one, printed)")
    p.add_argument("--seed", type=int, default=0, help="every choice is a function of the seed and the request")
    p.add_argument("--profile", default="gpt-oss-120b", choices=sorted(PROFILES),
                   help="the served model whose speed and token counts are modelled (default gpt-oss-120b on one "
                        "H100 under vLLM)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiplies every modelled wait actually slept: 1 real time, 0 answer at once (default 1)")
    p.add_argument("--failure-rate", type=float, default=0.2,
                   help="share of executor replies that fail realistically: cut off, or a kernel with a bug "
                        "(default 0.2)")
    p.add_argument("--real-share", type=float, default=0.3,
                   help="share of the other kernel replies that are a real kernel verbatim; the rest are "
                        "variants of one in its launch tunables (default 0.3)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        server = ReplayServer(args.task, seed=args.seed, profile=args.profile, time_scale=args.time_scale,
                              failure_rate=args.failure_rate, real_share=args.real_share, host=args.host,
                              port=args.port)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server.start()
    material = server.material.describe()
    real = len(material["real_kernels"])
    print(f"{NOTE}: task {material['definition']} ({real} real kernel{'s' if real != 1 else ''}, "
          f"{material['variants']} variants), profile {args.profile}, time scale {args.time_scale:g}, "
          f"seed {args.seed}", flush=True)
    print(server.url, flush=True)
    print(f"point a run at it: accelopt optimize {shlex.quote(args.task)} --model vllm:{MODEL_ID} --base-url "
          f"{server.url} ...   (stats: {server.url.removesuffix('/v1')}/replay/stats)", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(json.dumps({k: v for k, v in server.stats().items() if k not in ("profile", "material")}, indent=1),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
