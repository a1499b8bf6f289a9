"""The seeds of one evaluation: every input the judge draws comes from them.

The run draws one seed per evaluation (`draw`, from the operating system's randomness, in the
run's process); the judge derives one seed per phase and index from it (`derived`): the checks,
the widened and stress draws, the ghost replay, the configurations' checks and timing, the timing
rounds, the check after timing. A kernel that regenerates the judge's inputs ahead of time (the
seeds were constants: 0, 100, 300, 500, ... until 2026-12) has nothing to regenerate from: the
seed never enters its process, only the tensors drawn from it. A verdict records its seed, and
`accelopt check --replay` draws the same inputs again (the judge's random choice of which timed
calls get fresh values and which are checked is not replayed: it is not an input).

Stdlib only: the judge (a script) loads it by path.
"""

from __future__ import annotations

import hashlib
import secrets

BITS = 31  # every seed fits any make_inputs: torch's manual_seed, and numpy's 32-bit seeds too


def draw() -> int:
    """A fresh evaluation seed, unpredictable to anything that has not seen it."""
    return secrets.randbits(BITS)


def derived(seed: int, phase: str, index: int = 0) -> int:
    """The seed of one phase's index-th draw: distinct per (phase, index), the same for the same
    evaluation seed (a replay), and no simple function of it (no two phases' inputs line up)."""
    digest = hashlib.blake2b(f"{seed}/{phase}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << BITS) - 1)
