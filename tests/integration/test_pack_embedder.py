"""evals/pack_embedder.py: the embedding model carried as int8 embeds as the fp32 model does."""

from accelopt.evals.pack_embedder import default_model_dir, pack, unpack
from accelopt.memory.embedder import Embedder, check_model

LESSONS = ["BLOCK 256 -> 2048 on a row reduction: 1.27x, the loop's trip count fell eightfold",
           "num_warps 4 -> 8 hurt a one-row-per-program kernel whose row is one tile (0.83x)",
           "the chunk-wise online softmax rewrite: one exponential per element instead of two"]


def test_the_packed_model_is_a_quarter_of_the_size_and_embeds_within_cosine_0_999(tmp_path):
    model = default_model_dir()
    packed = pack(model, tmp_path / "packed")
    size = sum(p.stat().st_size for p in packed.rglob("*") if p.is_file())
    assert size < 0.3 * (model / "model.safetensors").stat().st_size
    restored = unpack(packed, tmp_path / "minilm")
    assert check_model(str(restored)) == str(restored)  # what a run checks as its store opens
    original, again = Embedder(str(model)).embed(LESSONS), Embedder(str(restored)).embed(LESSONS)
    for a, b in zip(original, again):  # both normalized: the dot product is the cosine
        assert sum(x * y for x, y in zip(a, b)) > 0.999
    # and a weight the packing damaged would show: the lessons stay as far apart as they were
    assert abs(sum(x * y for x, y in zip(again[0], again[1])) - sum(x * y for x, y in zip(original[0], original[1]))) < 0.01
