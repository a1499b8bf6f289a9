"""The memory's embedding model starts loading at setup where the run will store lessons, and
one load serves the warm-up and the first embedding."""

import threading

from accelopt.memory import embedder
from accelopt.nodes import services
from accelopt.nodes.context import RunContext


def test_the_embedder_warms_only_where_lessons_will_be_stored(monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(services.embedder, "warm", lambda name: asked.append(name))
    services.warm_memory(RunContext(use_memory=True), "cuda_event")
    services.warm_memory(RunContext(use_memory=True), "interpreter_wall")  # learns nothing there
    services.warm_memory(RunContext(use_memory=False), "cuda_event")
    services.warm_memory(RunContext(use_memory=True, learn_from_interpreter=True), "interpreter_wall")
    assert asked == [RunContext().embedder] * 2


def test_a_warm_up_and_a_first_embedding_load_the_model_once(monkeypatch):
    built: list[str] = []
    release = threading.Event()

    class Slow:
        def __init__(self, name):
            release.wait(5)
            built.append(name)

    monkeypatch.setattr(embedder, "Embedder", Slow)
    embedder._embedder.cache_clear()
    try:
        warming = embedder.warm("model-a")
        first = threading.Thread(target=embedder.get_embedder, args=("model-a",))
        first.start()
        release.set()
        warming.join(5)
        first.join(5)
        assert built == ["model-a"]
    finally:
        embedder._embedder.cache_clear()
