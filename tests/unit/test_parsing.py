"""Reply parsing and profile parsing."""

from tests.scripted import GOOD
from tests.conftest import FIXTURES
from accelopt.tools.codeparse import extract_kernel, split_plans


def test_extract_kernel_variants():
    assert extract_kernel(f"```python\n{GOOD}```") == GOOD
    assert extract_kernel(f"<think>```python\nimport triton\n```</think>\nFinal:\n```py\n{GOOD}```") == GOOD
    # An unterminated fence (reply cut by max_tokens) still yields the code.
    assert extract_kernel(f"~~~python\n{GOOD}") == GOOD
    # A helper snippet and the full module: the full module wins.
    assert extract_kernel(f"```python\nx = 1\n```\n```python\n{GOOD}```") == GOOD
    # An unfenced module is accepted; prose and fragments are not.
    assert extract_kernel(GOOD) == GOOD
    assert extract_kernel("I cannot do that.") is None
    assert extract_kernel("```python\ndef run(x):\n    return x\n```") is None
    assert extract_kernel("") is None


def test_split_plans():
    reply = "Intro\n### Plan 1: a\nfirst idea\n**Plan 2: b**\nsecond idea\n## Plan 3 - c\nthird"
    plans = split_plans(reply, 5)
    assert [p.splitlines()[1] for p in plans] == ["first idea", "second idea", "third"]
    assert len(split_plans(reply, 2)) == 2
    assert split_plans("just one idea without headers", 3) == ["just one idea without headers"]
    assert split_plans("   ", 3) == []


def test_ncu_csv_parsing_on_a_fixture():
    """tests/fixtures/ncu_raw.csv is hand-written in the documented `ncu --csv --page raw` layout
    (header, units row, one row per kernel); real ncu output is exercised by the GPU tests."""

    from accelopt.tools.harness.kernel_profile import parse_ncu_csv, summarize

    kernels = parse_ncu_csv((FIXTURES / "ncu_raw.csv").read_text())
    assert len(kernels) == 1 and kernels[0]["name"] == "rmsnorm_kernel"
    assert abs(kernels[0]["time_us"] - 30.208) < 1e-9  # "30,208" nanoseconds
    text = summarize(kernels, "T4096_H4096")
    assert "DRAM throughput % 46" in text and "registers/thread 32" in text and "no unit saturated" in text
