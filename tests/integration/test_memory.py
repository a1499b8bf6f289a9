"""The optimization memory with the real offline embedder and a real embedded Chroma."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelopt.memory.embedder import MemoryStoreError
from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
from accelopt.memory.store import InsightStore, embedding_text

ROW = "Row reductions over 4096 or more elements want 8 warps so that each thread holds fewer values in registers."
GEMM = "For bf16 matrix multiplication use 128x128 tiles with tl.dot and num_stages=4 to keep tensor cores fed."


def insight(child, title, lesson, task, speedup, kernel="row reduction", kind="positive", spread=0.01,
            backend="triton", timer="cuda_event"):
    return Insight(kind=kind, title=title, lesson=lesson, kernel_class=kernel, bottleneck="memory bandwidth",
                   evidence=Evidence(speedup=speedup, spread=spread, hardware="NVIDIA H200", timer=timer, task=task,
                                     backend=backend),
                   provenance=Provenance(run_id="run-1", parent_id="p", child_id=child, iteration=1))


@pytest.fixture
def store(tmp_path):
    return InsightStore(tmp_path / "mem", capacity=100)


def test_recall_finds_lessons_of_similar_kernels_only(store):
    store.add([insight("a", "More warps for long rows", ROW, "rmsnorm", 1.3),
               insight("b", "Larger tiles for GEMM", GEMM, "gemm_bf16", 1.8, kernel="GEMM"),
               insight("c", "NKI: tile the partition dimension", ROW, "rmsnorm", 1.5, backend="nki")])
    layernorm = "LayerNorm over the hidden dimension.\nKernel: row reduction, sum reduction, loops over the row"
    hits = store.recall(layernorm, backend="triton", timer="cuda_event", k=5, kernel_class="row reduction")
    assert [h.evidence.task for h in hits] == ["rmsnorm"]  # not the GEMM lesson, not the NKI one
    hits = store.recall("bf16 GEMM with tl.dot on tensor cores", backend="triton", timer="cuda_event", k=5,
                        kernel_class="GEMM / tiled matrix multiply")
    assert [h.evidence.task for h in hits] == ["gemm_bf16"]
    # GPU lessons are never recalled for interpreter runs, and the reverse.
    assert store.recall(layernorm, backend="triton", timer="interpreter_wall", k=5) == []


def test_near_duplicates_merge_keeping_the_stronger_evidence(store):
    weak = insight("a", "More warps for long rows", ROW, "rmsnorm", 1.10)
    strong = insight("b", "More warps for long rows", ROW.replace("8 warps", "8 warps,"), "softmax", 1.45)
    assert store.add([weak]) == [weak.id]
    assert store.add([strong]) == [weak.id]  # merged into the stored one
    (kept, meta), = store.all()
    assert kept.evidence.speedup == 1.45 and kept.evidence.task == "softmax"
    assert kept.support == 2 and strong.id in kept.merged_ids and meta["support"] == 2


LESSONS = [("Use 8 warps for long rows", ROW, 1.10), ("Tile GEMMs 128x128", GEMM, 1.9),
           ("Fuse the residual add into the norm", "Fusing the residual add into the norm saves a full round trip "
            "of the activations through HBM.", 1.3),
           ("Vectorize loads to 16 bytes", "Use contiguous blocks so that loads become 16-byte vector loads.", 1.2)]


@pytest.mark.parametrize("recalled,evicted", [(0, "Use 8 warps for long rows"), (5, "Vectorize loads to 16 bytes")])
def test_eviction_drops_the_weakest_least_recalled_first(tmp_path, recalled, evicted):
    store = InsightStore(tmp_path / "mem", capacity=3)
    store.add([insight(f"c{i}", t, text, "t", s) for i, (t, text, s) in enumerate(LESSONS[:3])])
    for _ in range(recalled):  # a lesson that keeps being useful is protected
        assert store.recall("row reduction warps", backend="triton", timer="cuda_event", k=1)[0].title == LESSONS[0][0]
    store.add([insight("c3", *LESSONS[3][:2], "t", LESSONS[3][2])])
    titles = {i.title for i, _ in store.all()}
    assert titles == {t for t, _, _ in LESSONS} - {evicted}


def test_export_import_round_trip(store, tmp_path):
    originals = [insight("a", "More warps for long rows", ROW, "rmsnorm", 1.3),
                 insight("b", "Avoid: tiny GEMM tiles", GEMM, "gemm", 0.7, kernel="GEMM", kind="negative")]
    store.add(originals)
    path = tmp_path / "team.jsonl"
    assert store.export_jsonl(path) == 2
    other = InsightStore(tmp_path / "other")
    assert other.import_jsonl(path) == 2
    assert {i.id: i for i, _ in other.all()} == {i.id: i for i in originals}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "no evidence"}\n')
    with pytest.raises(MemoryStoreError, match="bad.jsonl:1: not an insight"):
        other.import_jsonl(bad)


def test_corrupt_store_gives_advice(tmp_path):
    path = tmp_path / "mem"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(MemoryStoreError, match="cannot be opened.*--memory DIR.*--no-memory"):
        InsightStore(path)


def test_unreachable_server_and_missing_embedder_give_advice(tmp_path):
    with pytest.raises(MemoryStoreError, match="cannot reach the Chroma server.*chroma run"):
        InsightStore(url=f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(MemoryStoreError, match="not a local directory and nothing is downloaded"):
        InsightStore(tmp_path / "mem", embedder="some-org/some-model")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WRITER = """
import sys
from accelopt.memory.schema import Evidence, Insight, Provenance, Recipe
from accelopt.memory.store import InsightStore, embedding_text
store = InsightStore(url=sys.argv[1])
topics = ["warps", "tiles", "stages", "vector loads", "fusion", "split-K", "persistent kernels", "swizzling",
          "atomics", "prefetching"]
for i, topic in enumerate(topics):
    store.add([Insight(kind="positive", title=f"{sys.argv[2]}: {topic}", lesson=f"Writer {sys.argv[2]} lesson {i} about {topic} in kernel {sys.argv[2]}-{i}.",
               kernel_class="k" + sys.argv[2] + str(i), evidence=Evidence(speedup=1.1 + i / 100, hardware="H200", timer="cuda_event",
               task=f"task-{sys.argv[2]}", backend="triton"),
               provenance=Provenance(run_id=sys.argv[2], parent_id="p", child_id=f"c{i}", iteration=1))])
"""


@pytest.mark.slow
def test_two_writers_share_a_chroma_server(tmp_path):
    port = _free_port()
    chroma = os.path.join(os.path.dirname(sys.executable), "chroma")
    server = subprocess.Popen([chroma, "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                InsightStore(url=url)
                break
            except MemoryStoreError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, url, name]) for name in ("alpha", "beta")]
        assert [w.wait(timeout=300) for w in writers] == [0, 0]
        titles = {i.title for i, _ in InsightStore(url=url).all()}
        assert len(titles) == 20 and {t.split(":")[0] for t in titles} == {"alpha", "beta"}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_paraphrases_do_not_crowd_out_other_lessons(store):
    # Five stored copies of one lesson (written past the merge step) and one other relevant lesson.
    copies = [insight(f"dup{i}", "More warps for long rows", ROW, f"task{i}", 1.3) for i in range(5)]
    other = insight("fuse", "Fuse the residual add into the row reduction",
                    "Row reductions that follow a residual add should load both inputs and add in registers.",
                    "fused_add_rmsnorm", 1.2)
    vectors = store.embedder.embed([embedding_text(i) for i in copies + [other]])
    for item, vector in zip(copies + [other], vectors):
        store._upsert(item, vector, recalls=0)
    hits = store.recall("rmsnorm after a residual add: a row reduction over long rows; how many warps, and "
                        "should the residual add be fused", backend="triton", timer="cuda_event", k=2,
                        kernel_class="row reduction")
    assert {h.title for h in hits} == {"More warps for long rows", "Fuse the residual add into the row reduction"}


def test_an_unusable_summarizer_reply_still_yields_a_lesson():
    from accelopt.nodes.summarizer import build_insight
    from accelopt.policies.replies import parse_lesson

    parent = {"id": "p", "source": "x = tl.exp(x)\n", "workloads": {"w": {"bound": "memory"}}}
    child = {"id": "c", "source": "x = tl.exp2(x * LOG2E)\n"}
    evidence = Evidence(speedup=1.2, hardware="H200", timer="cuda_event", task="softmax", backend="triton")
    provenance = Provenance(run_id="r", parent_id="p", child_id="c", iteration=1)
    for reply in ("", "I think it got faster.", '```json\n{"title": ""}\n```', '{"lesson": 5'):
        made = build_insight(parent, child, "positive", "### Plan 1: use exp2\nfold log2(e)", parse_lesson(reply),
                             evidence, provenance, "openai:some-model")
        assert made.lesson and made.title == "use exp2"
        assert made.after == "x = tl.exp2(x * LOG2E)" and made.bottleneck == "memory-bound"


def test_a_new_best_reached_by_a_small_step_is_learned_from_the_baseline():
    """The last step to a new best is often below the lesson threshold; the whole way from the
    baseline is a measured pair of its own, so the configuration it reached is not lost."""
    from accelopt.nodes.context import RunContext
    from accelopt.nodes.summarizer import measured_pairs

    def cand(cid, parent, iteration, speedup, vs_parent, **extra):
        return {"id": cid, "parent_id": parent, "iteration": iteration, "status": "verified", "timer": "cuda_event",
                "speedup": speedup, "speedup_vs_parent": vs_parent, "beats_parent": vs_parent > 1.03,
                "loses_to_parent": vs_parent < 0.97, "versus": {"baseline": {"faster": speedup > 1.03}}, **extra}

    candidates = {"baseline": cand("baseline", None, 0, 1.0, 1.0, kind="kernel"),
                  "i1": cand("i1", "baseline", 1, 1.30, 1.30), "i2": cand("i2", "i1", 2, 1.33, 1.02),
                  "i2b": cand("i2b", "i1", 2, 0.90, 0.69)}
    state = {"iteration": 2, "candidates": candidates, "beam": ["i2", "i1"], "baseline_id": "baseline"}
    pairs = [(p["id"], c["id"], kind, ratio) for p, c, kind, ratio in measured_pairs(state, RunContext())]
    assert pairs == [("i1", "i2b", "negative", 0.69), ("baseline", "i2", "positive", 1.33)]
    # A best that did not change this iteration, or one step from the baseline, adds nothing.
    state["beam"] = ["i1"]
    assert [kind for _, _, kind, _ in measured_pairs(state, RunContext())] == ["negative"]


def test_a_store_loads_the_embedder_only_when_it_embeds(tmp_path):
    for check in (False, True):  # memory list / stats / show; a run
        store = InsightStore(tmp_path / f"m{check}", check_embedder=check)
        assert store._embedder is None and store.all() == [] and store.count() == 0
        assert store.recall("more warps", backend="triton", timer="cuda_event") == [] and store._embedder is None
        assert store.embedder.embed(["more warps"]) and store._embedder is not None


def test_a_broken_embedding_model_fails_when_the_store_opens_not_mid_run(tmp_path):
    """The model loads at the first embedding; its files are checked when the store opens: a
    missing, cut-off or garbled model is refused then, with the fix in the message."""
    from accelopt.memory.embedder import check_model, model_path

    good = Path(model_path("all-MiniLM-L6-v2"))
    assert check_model(str(good)) == str(good)

    def broken(name: str, change) -> Path:
        copy = tmp_path / name
        shutil.copytree(good, copy)
        change(copy)
        return copy

    def cut(copy: Path) -> None:
        weights = copy / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-1000])

    cases = {
        "cut off": broken("cut", cut),
        "modules.json does not parse": broken("garbled", lambda c: (c / "modules.json").write_text("{not json")),
        "no model.safetensors": broken("weightless", lambda c: (c / "model.safetensors").unlink()),
        "is cut off": broken("empty", lambda c: (c / "model.safetensors").write_bytes(b"")),
    }
    for words, folder in cases.items():
        with pytest.raises(MemoryStoreError, match="--no-memory") as info:
            InsightStore(tmp_path / f"store-{folder.name}", embedder=str(folder))
        assert words in str(info.value), (folder.name, str(info.value))


def _tuned(child: str, task: str, start: dict, result: dict, speedup: float) -> Insight:
    """A tuner lesson as the summarizer writes it: the text names the move, the recipe holds it."""
    moved = ", ".join(f"`{k}` from {start[k]} to {v}" for k, v in result.items() if start[k] != v)
    lesson = insight(child, moved, f"Setting {moved} made the row kernel {speedup:.2f}x faster.", task, speedup)
    return lesson.model_copy(update={"recipe": Recipe(kernel_class="row reduction", start=start, result=result,
                                                      speedup_vs_baseline=speedup)})


def test_lessons_that_read_alike_but_measured_other_changes_stay_apart_and_are_recalled_by_where_they_start(store):
    """On the H100 the near-duplicate rule merged all seven of fused_add_rmsnorm's lessons
    (BLOCK 256 -> 512, 512 -> 1024, 1024 -> 2048, 8 warps at 1024, ...) into one: their texts
    differ in numbers only, and the recipes, the part a search can use, were dropped."""
    start = {"BLOCK": 256, "num_warps": 4, "num_stages": 3}
    at_1024 = {**start, "BLOCK": 1024}
    lessons = [_tuned("a", "fused_add_rmsnorm", start, {**start, "BLOCK": 512}, 1.24),
               _tuned("b", "fused_add_rmsnorm", start, at_1024, 1.42),
               _tuned("c", "fused_add_rmsnorm", at_1024, {**at_1024, "BLOCK": 2048}, 1.68),
               _tuned("d", "fused_add_rmsnorm", at_1024, {**at_1024, "num_warps": 8}, 1.57),
               _tuned("e", "layernorm", start, at_1024, 1.28)]  # the same change on another task: merges
    store.add(lessons)
    kept = {i.id: i for i, _ in store.all()}
    assert set(kept) == {lessons[n].id for n in range(4)} and kept[lessons[1].id].support == 2
    # recalled by meaning, a search standing at BLOCK 1024 may get none of the lessons that start there
    query = "RMSNorm with a residual add.\nKernel: row reduction, sum reduction, loops over the row\nBottleneck: memory"
    by_meaning = store.recall(query, backend="triton", timer="cuda_event", k=1, kernel_class="row reduction")
    assert len(by_meaning) == 1
    hits = store.recall(query, backend="triton", timer="cuda_event", k=1, kernel_class="row reduction",
                        config=at_1024)
    from_here = [h for h in hits if h.recipe and h.recipe.start == at_1024]
    assert len(hits) == 2 and len(from_here) >= 1
    # the strongest of those that start here, if meaning did not already bring it
    assert lessons[2].id in {h.id for h in hits}
    # another class, or a configuration no lesson started at, adds nothing
    assert store.recall(query, backend="triton", timer="cuda_event", k=1, kernel_class="GEMM",
                        config=at_1024) == store.recall(query, backend="triton", timer="cuda_event", k=1,
                                                        kernel_class="GEMM")
    assert len(store.recall(query, backend="triton", timer="cuda_event", k=1, kernel_class="row reduction",
                            config={**start, "BLOCK": 64})) == 1
