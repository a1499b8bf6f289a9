"""Where insights live between runs.

This first store is an append-only JSONL file with keyword recall, enough for the graph to
write and read lessons across runs; the Chroma store with embeddings replaces it behind the
same two methods (add, recall).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from platformdirs import user_data_dir

from memory.schema import Insight

_WORD = re.compile(r"[a-z0-9_]+")


def default_memory_dir() -> Path:
    return Path(user_data_dir("accelopt")) / "memory"


class InsightStore:
    def __init__(self, directory: str | Path | None = None):
        self.path = Path(directory or default_memory_dir()) / "insights.jsonl"
        self._lock = threading.Lock()

    def add(self, insights: list[Insight]) -> None:
        if not insights:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self.path.open("a") as f:
            for insight in insights:
                f.write(insight.model_dump_json() + "\n")

    def all(self) -> list[Insight]:
        if not self.path.exists():
            return []
        latest: dict[str, Insight] = {}
        for line in self.path.read_text().splitlines():
            if line.strip():
                insight = Insight.model_validate_json(line)
                latest[insight.id] = insight
        return list(latest.values())

    def recall(self, query: str, *, backend: str, timer: str, k: int) -> list[Insight]:
        """Top-k by word overlap with the query, then by measured effect; same backend and timer only."""
        words = set(_WORD.findall(query.lower()))
        scored = []
        for insight in self.all():
            if insight.evidence.backend != backend or insight.evidence.timer != timer:
                continue
            text = " ".join([insight.title, insight.lesson, insight.kernel_class, insight.bottleneck,
                             insight.evidence.task]).lower()
            overlap = len(words & set(_WORD.findall(text)))
            effect = abs(insight.evidence.speedup - 1.0)
            scored.append((overlap, effect, insight))
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [s[2] for s in scored[:k] if s[0] > 0]
