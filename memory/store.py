"""The optimization memory: insights in Chroma, recalled by meaning.

Embedded `PersistentClient` in a directory by default (the user data dir, or --memory); a Chroma
server (`chroma run`) through `HttpClient` with --memory-url, so concurrent runs and machines
share one memory. Vectors come from our own offline embedder, never from Chroma's default.

- Scalar metadata (backend, timer, task, kernel class, kind, speedup, strength, recalls) filters
  and ranks; the full insight rides along as JSON.
- A near-duplicate of a stored lesson (same backend, timer and kind; cosine similarity above
  DUPLICATE_SIMILARITY) merges into it: the stronger evidence's text and numbers are kept and
  the support count grows.
- Past capacity, the weakest-evidenced, least-recalled insights are evicted. Never at random.
- Recall: top candidates by similarity (above MIN_SIMILARITY and near the best match, so an
  unrelated lesson is not returned just to fill k), re-ranked by measured evidence,
  then chosen with maximal marginal relevance so that paraphrases of one lesson do not crowd out
  the others.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from platformdirs import user_data_dir

from memory.embedder import DEFAULT_EMBEDDER, MemoryStoreError, get_embedder
from memory.schema import Insight

COLLECTION = "accelopt-insights"
DUPLICATE_SIMILARITY = 0.92
MIN_SIMILARITY = 0.3
RELATIVE_MARGIN = 0.12  # keep only candidates within this similarity of the best match
DIVERSITY = 0.3  # MMR: weight of dissimilarity to lessons already chosen


def default_memory_dir() -> Path:
    return Path(user_data_dir("accelopt")) / "memory"


def strength(insight: Insight) -> float:
    """Evidence strength: the size of the measured effect, more for repeated support, less for spread."""
    effect = abs(math.log(max(insight.evidence.speedup, 1e-6)))
    spread = insight.evidence.spread or 0.0
    return effect * (1.0 + math.log(insight.support)) / (1.0 + 10.0 * spread)


def embedding_text(insight: Insight) -> str:
    # The task is metadata, not meaning: the same lesson learned on two tasks should merge.
    return f"{insight.title}. {insight.lesson} Kernel: {insight.kernel_class}. Bottleneck: {insight.bottleneck}."


class InsightStore:
    def __init__(self, directory: str | Path | None = None, *, url: str | None = None,
                 embedder: str = DEFAULT_EMBEDDER, capacity: int = 2000):
        import chromadb
        from chromadb.config import Settings

        self.capacity = capacity
        self.embedder = get_embedder(embedder)
        self.location = url or str(Path(directory or default_memory_dir()))
        self._lock = threading.Lock()
        settings = Settings(anonymized_telemetry=False)
        try:
            if url:
                parsed = urlparse(url)
                client = chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                             ssl=parsed.scheme == "https", settings=settings)
                client.heartbeat()
            else:
                Path(self.location).mkdir(parents=True, exist_ok=True)
                client = chromadb.PersistentClient(path=self.location, settings=settings)
            self.collection = client.get_or_create_collection(
                COLLECTION, embedding_function=None, metadata={"hnsw:space": "cosine", "embedder": embedder})
        except MemoryStoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure to open gets advice
            raise MemoryStoreError(self._open_advice(url, exc)) from None
        built_with = (self.collection.metadata or {}).get("embedder")
        if built_with and built_with != embedder:
            raise MemoryStoreError(f"the memory at {self.location} was built with {built_with} embeddings, not "
                                   f"{embedder}: pass --embedder {built_with}, or use another --memory")

    def _open_advice(self, url: str | None, exc: Exception) -> str:
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
        if url:
            return (f"cannot reach the Chroma server at {url} ({detail}): start it with "
                    "`chroma run --path DIR --host HOST --port PORT`, or drop --memory-url, or run with --no-memory")
        return (f"the memory store at {self.location} cannot be opened ({detail}): it may be corrupt or held by "
                "another process; move it aside, pass another --memory DIR, serve it with `chroma run` for "
                "concurrent runs, or run with --no-memory")

    # ------------------------------------------------------------------ writing

    def add(self, insights: list[Insight]) -> list[str]:
        """Store insights, merging near-duplicates; returns the ids that now hold each one."""
        if not insights:
            return []
        vectors = self.embedder.embed([embedding_text(i) for i in insights])
        held = []
        with self._lock:
            for insight, vector in zip(insights, vectors):
                held.append(self._add_one(insight, vector))
            self._evict()
        return held

    def _add_one(self, insight: Insight, vector: list[float]) -> str:
        twin = self._nearest_duplicate(insight, vector)
        if twin is not None:
            stored, stored_meta = twin
            stronger = insight if strength(insight) > strength(stored) else stored
            merged = stronger.model_copy(update={
                "id": stored.id, "support": stored.support + insight.support,
                "merged_ids": sorted(set(stored.merged_ids + [insight.id] + insight.merged_ids))})
            self._upsert(merged, vector if stronger is insight else None, recalls=stored_meta.get("recalls", 0))
            return stored.id
        self._upsert(insight, vector, recalls=0)
        return insight.id

    def _nearest_duplicate(self, insight: Insight, vector: list[float]):
        if self.collection.count() == 0:
            return None
        found = self.collection.query(query_embeddings=[vector], n_results=1, include=["metadatas", "distances"],
                                      where=self._where(insight.evidence.backend, insight.evidence.timer,
                                                        kind=insight.kind))
        if not found["ids"][0] or 1.0 - found["distances"][0][0] < DUPLICATE_SIMILARITY:
            return None
        meta = found["metadatas"][0][0]
        return Insight.model_validate_json(meta["insight"]), meta

    def _upsert(self, insight: Insight, vector: list[float] | None, recalls: int) -> None:
        meta = {"backend": insight.evidence.backend, "timer": insight.evidence.timer, "task": insight.evidence.task,
                "kernel_class": insight.kernel_class, "kind": insight.kind, "speedup": insight.evidence.speedup,
                "hardware": insight.evidence.hardware, "strength": strength(insight), "recalls": recalls,
                "support": insight.support, "added": time.time(), "insight": insight.model_dump_json()}
        if vector is None:
            vector = self.collection.get(ids=[insight.id], include=["embeddings"])["embeddings"][0]
        self.collection.upsert(ids=[insight.id], embeddings=[list(vector)], documents=[embedding_text(insight)],
                               metadatas=[meta])

    def _evict(self) -> None:
        excess = self.collection.count() - self.capacity
        if excess <= 0:
            return
        rows = self.collection.get(include=["metadatas"])
        order = sorted(zip(rows["ids"], rows["metadatas"]),
                       key=lambda r: (r[1]["strength"] * (1.0 + math.log1p(r[1]["recalls"])), r[1]["added"]))
        self.collection.delete(ids=[rid for rid, _ in order[:excess]])

    # ------------------------------------------------------------------ reading

    @staticmethod
    def _where(backend: str, timer: str | None, kind: str | None = None) -> dict:
        clauses = [{"backend": backend}] + ([{"timer": timer}] if timer else []) + ([{"kind": kind}] if kind else [])
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def recall(self, query: str, *, backend: str, timer: str | None, k: int = 5) -> list[Insight]:
        if k <= 0 or self.collection.count() == 0:
            return []
        vector = self.embedder.embed([query])[0]
        found = self.collection.query(query_embeddings=[vector], n_results=min(4 * k, self.collection.count()),
                                      where=self._where(backend, timer),
                                      include=["metadatas", "distances", "embeddings"])
        pool = [(rid, 1.0 - dist, meta, emb) for rid, dist, meta, emb in
                zip(found["ids"][0], found["distances"][0], found["metadatas"][0], found["embeddings"][0])]
        floor = max(MIN_SIMILARITY, max((p[1] for p in pool), default=0.0) - RELATIVE_MARGIN)
        pool = [p for p in pool if p[1] >= floor]
        chosen = _diverse(pool, k)
        with self._lock:
            if chosen:
                self.collection.update(ids=[c[0] for c in chosen],
                                       metadatas=[{"recalls": c[2]["recalls"] + 1} for c in chosen])
        return [Insight.model_validate_json(c[2]["insight"]) for c in chosen]

    def get(self, insight_id: str) -> Insight | None:
        rows = self.collection.get(ids=[insight_id], include=["metadatas"])
        return Insight.model_validate_json(rows["metadatas"][0]["insight"]) if rows["ids"] else None

    def all(self) -> list[tuple[Insight, dict]]:
        rows = self.collection.get(include=["metadatas"])
        return [(Insight.model_validate_json(m["insight"]), m) for m in rows["metadatas"]]

    def delete(self, ids: list[str]) -> None:
        if ids:
            self.collection.delete(ids=ids)

    def count(self) -> int:
        return self.collection.count()

    # ------------------------------------------------------------------ sharing

    def export_jsonl(self, path: Path) -> int:
        items = self.all()
        path.write_text("".join(json.dumps({**i.model_dump(), "recalls": m["recalls"]}) + "\n" for i, m in items))
        return len(items)

    def import_jsonl(self, path: Path) -> int:
        insights = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    data = json.loads(line)
                    data.pop("recalls", None)
                    insights.append(Insight.model_validate(data))
                except (json.JSONDecodeError, ValueError) as exc:
                    raise MemoryStoreError(f"{path}:{n}: not an insight ({str(exc)[:200]})") from None
        self.add(insights)
        return len(insights)


def _diverse(pool: list[tuple], k: int) -> list[tuple]:
    """Maximal marginal relevance over (id, similarity, meta, embedding): relevance is similarity
    scaled up by evidence strength; each pick is penalized by its similarity to earlier picks."""
    def relevance(item) -> float:
        return item[1] * (1.0 + min(item[2]["strength"], 1.0))

    chosen: list[tuple] = []
    remaining = list(pool)
    while remaining and len(chosen) < k:
        def mmr(item) -> float:
            overlap = max((sum(a * b for a, b in zip(item[3], c[3])) for c in chosen), default=0.0)
            return (1 - DIVERSITY) * relevance(item) - DIVERSITY * overlap
        best = max(remaining, key=mmr)
        chosen.append(best)
        remaining.remove(best)
    return chosen
