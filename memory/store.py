"""The optimization memory: insights in Chroma, recalled by meaning.

Embedded `PersistentClient` in a directory by default (the user data dir, or --memory); a Chroma
server (`chroma run`) through `HttpClient` with --memory-url, so concurrent runs and machines
share one memory. Vectors come from our own offline embedder, never from Chroma's default.

- One collection per (backend, timer): Triton lessons never reach NKI, GPU lessons never mix with
  interpreter ones, and recall needs no metadata filter (a filtered query cost 4x an unfiltered
  one). Scalar metadata (task, kernel class, kind, speedup, strength, recalls) ranks; the full
  insight rides along as JSON.
- A near-duplicate of a stored lesson (same backend, timer and kind; cosine similarity above
  DUPLICATE_SIMILARITY; and, where either carries a recipe, the same change measured) merges into
  it: the stronger evidence's text and numbers are kept and the support count grows.
- Past capacity, the weakest-evidenced, least-recalled insights are evicted. Never at random.
- Recall: top candidates by similarity, lessons of another kernel family discounted, above
  MIN_SIMILARITY and near the best match (an unrelated lesson is not returned just to fill k),
  re-ranked by measured evidence,
  then chosen with maximal marginal relevance so that paraphrases of one lesson do not crowd out
  the others. Given the kernel's launch configuration, lessons whose recipe started exactly there
  (a metadata match, `recipe_start`) come too: what to try next from where a search stands.
"""

from __future__ import annotations

import atexit
import json
import math
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from platformdirs import user_data_dir
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

from accelopt.memory.embedder import DEFAULT_EMBEDDER, Embedder, MemoryStoreError, check_model, get_embedder
from accelopt.memory.features import class_family
from accelopt.memory.schema import Insight, config_key


def _not_on_disk_yet(exc: BaseException) -> bool:
    """A Chroma server's passing state, not a fault: a collection another writer has just written,
    whose vector index the server has yet to write ("Error creating hnsw segment reader: Nothing
    found on disk"). Asked again a moment later, it answers."""
    from chromadb.errors import InternalError

    return isinstance(exc, InternalError) and "Nothing found on disk" in str(exc)


@retry(retry=retry_if_exception(_not_on_disk_yet), wait=wait_exponential(multiplier=0.05, max=1.0),
       stop=stop_after_delay(15), reraise=True)
def query_collection(collection, **kwargs: Any) -> Any:
    """`collection.query`, asked again while the server has the index still to write."""
    return collection.query(**kwargs)


COLLECTION_PREFIX = "accelopt-insights"
DUPLICATE_SIMILARITY = 0.92
DUPLICATE_CANDIDATES = 10  # nearest lessons looked at for a twin: alike texts with other recipes come first
MIN_SIMILARITY = 0.3
RELATIVE_MARGIN = 0.2   # keep only candidates within this similarity of the best match
FAMILY_PENALTY = 0.15   # a lesson from another kernel family (GEMM vs reduction...) must be this much closer
DIVERSITY = 0.3  # MMR: weight of dissimilarity to lessons already chosen


STORE_MARKER = "accelopt-memory.json"  # written at first open: this directory held a store
DATABASE = "chroma.sqlite3"


def default_memory_dir() -> Path:
    return Path(user_data_dir("accelopt")) / "memory"


def require_store_dir(directory: str | Path, advice: str) -> None:
    """A store directory someone named must exist: a typo must not silently start an empty memory.
    (The default location is created silently.)"""
    if not Path(directory).expanduser().exists():
        raise MemoryStoreError(f"no memory store at {directory} (a typo?): {advice}")


def _check_not_lost(path: Path) -> None:
    """A store whose database vanished would open as a new, empty one: say so instead. Its
    lessons are also in every run directory's insights.jsonl, which `memory import` reads."""
    if (path / DATABASE).exists() or not path.is_dir():
        return
    segments = [p.name for p in path.iterdir() if p.is_dir() and len(p.name) == 36 and p.name.count("-") == 4]
    if (path / STORE_MARKER).exists() or segments:
        raise MemoryStoreError(
            f"the memory store at {path} has lost its database ({DATABASE} is missing, the rest of the store is "
            f"still there): restore {DATABASE} from a backup, or move {path} aside and rebuild the memory with "
            f"`accelopt memory import RUN_DIR/insights.jsonl --memory {path}` (every run directory keeps the "
            "lessons it learned there), or run with --no-memory")


def _mark(path: Path, embedder: str) -> None:
    marker = path / STORE_MARKER
    if not marker.exists():
        marker.write_text(json.dumps({"created": time.strftime("%Y-%m-%d %H:%M:%S"), "embedder": embedder}) + "\n")


def evidence_strength(insight: Insight) -> float:
    """One measurement's strength: the size of the measured effect, less for spread."""
    effect = abs(math.log(max(insight.evidence.speedup, 1e-6)))
    return effect / (1.0 + 10.0 * (insight.evidence.spread or 0.0))


def strength(insight: Insight) -> float:
    """A lesson's strength: its evidence, more for repeated support."""
    return evidence_strength(insight) * (1.0 + math.log(insight.support))


def embedding_text(insight: Insight) -> str:
    # The task is metadata, not meaning: the same lesson learned on two tasks should merge.
    return f"{insight.title}. {insight.lesson} Kernel: {insight.kernel_class}. Bottleneck: {insight.bottleneck}."


class InsightStore:
    def __init__(self, directory: str | Path | None = None, *, url: str | None = None,
                 embedder: str = DEFAULT_EMBEDDER, capacity: int = 2000, check_embedder: bool = True):
        import chromadb
        from chromadb.config import Settings

        self.capacity = capacity
        self.embedder_name = embedder
        self.location = url or str(Path(directory or default_memory_dir()))
        self._lock = threading.RLock()
        self._collections: dict[str, Any] = {}  # chromadb Collections, by name
        self._pending_recalls: Counter = Counter()  # flushed in batches: a write per recall is slow
        settings = Settings(anonymized_telemetry=False)
        try:
            if url:
                parsed = urlparse(url)
                self.client = chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                                  ssl=parsed.scheme == "https", settings=settings)
                self.client.heartbeat()
            else:
                _check_not_lost(Path(self.location))
                Path(self.location).mkdir(parents=True, exist_ok=True)
                self.client = chromadb.PersistentClient(path=self.location, settings=settings)
                _mark(Path(self.location), embedder)
            for name in self._names():
                self._open(name)
        except MemoryStoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure to open gets advice
            raise MemoryStoreError(self._open_advice(url, exc)) from None
        # After the store opened (a bad location fails first): the model's files are checked now,
        # so a run fails at its start on a broken model, and it loads at the first embedding.
        # Commands that only read (memory list, stats, show) skip the check.
        if check_embedder:
            check_model(embedder)
        self._embedder: Embedder | None = None
        atexit.register(self._flush_at_exit)

    def _open_advice(self, url: str | None, exc: Exception) -> str:
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
        if url:
            return (f"cannot reach the Chroma server at {url} ({detail}): start it with "
                    "`chroma run --path DIR --host HOST --port PORT`, or drop --memory-url, or run with --no-memory")
        return (f"the memory store at {self.location} cannot be opened ({detail}): it may be corrupt or held by "
                "another process; move it aside, pass another --memory DIR, serve it with `chroma run` for "
                "concurrent runs, or run with --no-memory")

    # ------------------------------------------------------------------ collections

    def _names(self) -> list[str]:
        names = [c if isinstance(c, str) else c.name for c in self.client.list_collections()]
        return [n for n in names if n.startswith(COLLECTION_PREFIX)]

    def _open(self, name: str):
        if name not in self._collections:
            collection = self.client.get_or_create_collection(
                name, embedding_function=None, metadata={"hnsw:space": "cosine", "embedder": self.embedder_name})
            built_with = (collection.metadata or {}).get("embedder")
            if built_with and built_with != self.embedder_name:
                raise MemoryStoreError(f"the memory at {self.location} was built with {built_with} embeddings, not "
                                       f"{self.embedder_name}: pass --embedder {built_with}, or use another --memory")
            self._collections[name] = collection
        return self._collections[name]

    def _collection(self, backend: str, timer: str):
        return self._open(f"{COLLECTION_PREFIX}.{backend}.{timer}")

    def _each(self):
        for name in self._names():
            yield self._open(name)

    # ------------------------------------------------------------------ writing

    def add(self, insights: list[Insight]) -> list[str]:
        """Store insights, merging near-duplicates; returns the ids that now hold each one."""
        if not insights:
            return []
        vectors = self.embedder.embed([embedding_text(i) for i in insights])
        with self._lock:
            self.flush()
            held = [self._add_one(insight, vector) for insight, vector in zip(insights, vectors)]
            self.prune(self.capacity)
        return held

    def _add_one(self, insight: Insight, vector: list[float]) -> str:
        collection = self._collection(insight.evidence.backend, insight.evidence.timer)
        twin = self._nearest_duplicate(collection, insight, vector)
        if twin is not None:
            stored, stored_meta = twin
            # the stronger evidence's text, judged on the evidence alone: the stored lesson's
            # growing support must not keep a weaker measurement's text forever
            stronger = insight if evidence_strength(insight) > evidence_strength(stored) else stored
            merged = stronger.model_copy(update={
                "id": stored.id, "support": stored.support + insight.support,
                "merged_ids": sorted(set(stored.merged_ids + [insight.id] + insight.merged_ids))})
            self._upsert(merged, vector if stronger is insight else None, recalls=stored_meta.get("recalls", 0))
            return stored.id
        self._upsert(insight, vector, recalls=0)
        return insight.id

    @staticmethod
    def _nearest_duplicate(collection, insight: Insight, vector: list[float]):
        count = collection.count()
        if count == 0:
            return None
        found = query_collection(collection, query_embeddings=[vector],
                                 n_results=min(DUPLICATE_CANDIDATES, count), include=["metadatas", "distances"])
        for dist, meta in zip(found["distances"][0], found["metadatas"][0]):
            if meta["kind"] != insight.kind or 1.0 - dist < DUPLICATE_SIMILARITY:
                continue
            stored = Insight.model_validate_json(meta["insight"])
            # Lessons with recipes are the same lesson only if they measured the same change:
            # "BLOCK 256 -> 1024" and "BLOCK 1024 -> 2048" read alike, and the numbers are the lesson.
            if (stored.recipe is None and insight.recipe is None) or \
                    (stored.recipe is not None and stored.recipe.same_change(insight.recipe)):
                return stored, meta
        return None

    def _upsert(self, insight: Insight, vector: list[float] | None, recalls: int) -> None:
        collection = self._collection(insight.evidence.backend, insight.evidence.timer)
        meta = {"backend": insight.evidence.backend, "timer": insight.evidence.timer, "task": insight.evidence.task,
                "kernel_class": insight.kernel_class, "family": class_family(insight.kernel_class), "kind": insight.kind, "speedup": insight.evidence.speedup,
                "hardware": insight.evidence.hardware, "strength": strength(insight), "recalls": recalls,
                "support": insight.support, "added": time.time(), "insight": insight.model_dump_json(),
                "recipe_start": _launch_start(insight)}
        if vector is None:
            vector = collection.get(ids=[insight.id], include=["embeddings"])["embeddings"][0]
        collection.upsert(ids=[insight.id], embeddings=[list(vector)], documents=[embedding_text(insight)],
                          metadatas=[meta])

    def prune(self, keep: int) -> int:
        """Evict down to `keep` insights: weakest evidence times recall usefulness first, oldest
        first among equals. Returns how many were evicted."""
        excess = self.count() - keep
        if excess <= 0:
            return 0
        rows = []
        for collection in self._each():
            got = collection.get(include=["metadatas"])
            rows += [(collection, rid, meta) for rid, meta in zip(got["ids"], got["metadatas"])]
        rows.sort(key=lambda r: (r[2]["strength"] * (1.0 + math.log1p(r[2]["recalls"])), r[2]["added"]))
        for collection, rid, _ in rows[:excess]:
            collection.delete(ids=[rid])
        return excess

    def flush(self) -> None:
        """Write pending recall counts (they steer eviction)."""
        with self._lock:
            pending, self._pending_recalls = self._pending_recalls, Counter()
            by_collection: dict[str, dict[str, int]] = {}
            for (name, rid), n in pending.items():
                by_collection.setdefault(name, {})[rid] = n
            for name, counts in by_collection.items():
                collection = self._collections[name]
                rows = collection.get(ids=list(counts), include=["metadatas"])
                if rows["ids"]:
                    collection.update(ids=rows["ids"], metadatas=[{"recalls": m["recalls"] + counts[rid]}
                                                                  for rid, m in zip(rows["ids"], rows["metadatas"])])

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = get_embedder(self.embedder_name)
        return self._embedder

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - the store may be gone (a temporary dir); counts are advisory
            pass

    # ------------------------------------------------------------------ reading

    def recall(self, query: str, *, backend: str, timer: str | None, k: int = 5,
               kernel_class: str | None = None, config: dict[str, int] | None = None) -> list[Insight]:
        """Up to k lessons by meaning (below); then, given the kernel's launch `config` and class,
        up to k more whose launch recipe started at exactly that configuration on a kernel of that
        class, strongest first. Meaning cannot tell "from BLOCK 1024, 8 warps won" from "from BLOCK
        256, a larger BLOCK won": the text differs in numbers only, and the numbers decide which
        one a search standing at BLOCK 1024 can use."""
        name = f"{COLLECTION_PREFIX}.{backend}.{timer}"
        if k <= 0 or (name not in self._collections and name not in self._names()):
            return []
        chosen = self._recall_by_meaning(name, query, k, kernel_class)
        if config and kernel_class:
            chosen += self._recall_by_start(name, kernel_class, config, k, {i.id for i in chosen})
        return chosen

    def _recall_by_start(self, name: str, kernel_class: str, config: dict[str, int], k: int,
                         held: set[str]) -> list[Insight]:
        rows = self._open(name).get(
            where={"$and": [{"recipe_start": config_key(config)}, {"kernel_class": kernel_class}]},
            include=["metadatas"])
        ranked = sorted((r for r in zip(rows["ids"], rows["metadatas"]) if r[0] not in held),
                        key=lambda r: -r[1]["strength"])[:k]
        with self._lock:
            for rid, _ in ranked:
                self._pending_recalls[(name, rid)] += 1
        return [Insight.model_validate_json(meta["insight"]) for _, meta in ranked]

    def _recall_by_meaning(self, name: str, query: str, k: int, kernel_class: str | None) -> list[Insight]:
        collection = self._open(name)
        count = collection.count()
        if count == 0:
            return []
        vector = self.embedder.embed([query])[0]
        found = query_collection(collection, query_embeddings=[vector], n_results=min(4 * k, count),
                                 include=["metadatas", "distances", "embeddings"])
        similarity = 1.0 - np.asarray(found["distances"][0])
        family = class_family(kernel_class or "")
        if family != "unknown":
            other = [m.get("family", "unknown") not in (family, "unknown") for m in found["metadatas"][0]]
            similarity = similarity - FAMILY_PENALTY * np.asarray(other, dtype=float)
        floor = max(MIN_SIMILARITY, float(similarity.max()) - RELATIVE_MARGIN)
        keep = np.flatnonzero(similarity >= floor)
        metas = [found["metadatas"][0][i] for i in keep]
        chosen = _diverse(similarity[keep], np.asarray(found["embeddings"][0])[keep],
                          np.asarray([m["strength"] for m in metas]), k)
        with self._lock:  # written at the next add, listing, prune or exit: eviction is what reads them
            for i in chosen:
                self._pending_recalls[(name, found["ids"][0][keep[i]])] += 1
        return [Insight.model_validate_json(metas[i]["insight"]) for i in chosen]

    def get(self, insight_id: str) -> Insight | None:
        for collection in self._each():
            rows = collection.get(ids=[insight_id], include=["metadatas"])
            if rows["ids"]:
                return Insight.model_validate_json(rows["metadatas"][0]["insight"])
        return None

    def all(self) -> list[tuple[Insight, dict]]:
        self.flush()
        out = []
        for collection in self._each():
            out += [(Insight.model_validate_json(m["insight"]), m)
                    for m in collection.get(include=["metadatas"])["metadatas"]]
        return out

    def count(self) -> int:
        return sum(c.count() for c in self._each())

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


def _launch_start(insight: Insight) -> str:
    """Where a launch recipe (no rewrites) started, as config_key; "" for any other lesson."""
    recipe = insight.recipe
    return config_key(recipe.start) if recipe is not None and not recipe.rewrites else ""


def _diverse(similarity: np.ndarray, vectors: np.ndarray, strengths: np.ndarray, k: int) -> list[int]:
    """Maximal marginal relevance: relevance is similarity scaled up by evidence strength; each
    pick is penalized by its similarity to the lessons already picked."""
    relevance = similarity * (1.0 + np.minimum(strengths, 1.0))
    overlap = np.zeros(len(similarity))
    chosen: list[int] = []
    for _ in range(min(k, len(similarity))):
        score = (1 - DIVERSITY) * relevance - DIVERSITY * overlap
        score[chosen] = -np.inf
        score[overlap >= DUPLICATE_SIMILARITY] = -np.inf  # a paraphrase of a lesson already chosen
        if not np.isfinite(score).any():
            break
        pick = int(np.argmax(score))
        chosen.append(pick)
        overlap = np.maximum(overlap, vectors @ vectors[pick])
    return chosen
