"""`accelopt memory ...` against a real store."""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from accelopt.cli.app import app
from tests.integration.test_cli_errors import assert_clean_error, run_cli
from tests.integration.test_memory import GEMM, ROW, insight

pytestmark = pytest.mark.slow


def cli(*args):
    return run_cli(*args, env={"COLUMNS": "250"})  # rich tables wrap to the terminal width


def in_process(*args) -> SimpleNamespace:
    """The same command through typer's runner: the embedder loads once for the test, not once a
    command (each fresh process spends seconds on it; the first command of the test is a real one)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout)


def test_memory_commands_round_trip(tmp_path):
    from accelopt.memory.store import InsightStore

    source = InsightStore(tmp_path / "a")
    source.add([insight("a", "More warps for long rows", ROW, "rmsnorm", 1.3),
                insight("b", "Larger tiles for GEMM", GEMM, "gemm_bf16", 1.8, kernel="GEMM")])
    shared = tmp_path / "team.jsonl"
    source.export_jsonl(shared)
    mem = ["--memory", str(tmp_path / "b")]

    imported = cli("memory", "import", str(shared), *mem)
    assert imported.returncode == 0 and "imported 2 insights" in imported.stdout
    listing = in_process("memory", "list", *mem)
    assert "More warps for long rows" in listing.stdout and "Larger tiles for GEMM" in listing.stdout
    found = in_process("memory", "search", "bf16 matmul on tensor cores", "--timer", "cuda_event", *mem)
    assert "Larger tiles for GEMM" in found.stdout and "More warps" not in found.stdout
    import torch

    if not torch.cuda.is_available():  # the default searches this machine's lessons: the interpreter's
        here = in_process("memory", "search", "bf16 matmul on tensor cores", *mem)
        assert "no triton lessons timed with interpreter_wall match (of 2 in" in " ".join(here.stdout.split())
        assert "--timer cuda_event" in here.stdout
    ident = next(i.id for i, _ in source.all() if i.evidence.task == "rmsnorm")
    shown = json.loads(in_process("memory", "show", ident, *mem).stdout)
    assert shown["evidence"]["speedup"] == 1.3
    stats = json.loads(in_process("memory", "stats", "--json", *mem).stdout)
    assert stats["insights"] == 2 and stats["task"] == {"rmsnorm": 1, "gemm_bf16": 1}
    assert stats["location"] == str(tmp_path / "b")  # the store's path, not "default"
    tables = " ".join(in_process("memory", "stats", *mem).stdout.split())
    assert f"2 insights in {tmp_path / 'b'}" in tables and "by task" in tables and "{" not in tables
    pruned = in_process("memory", "prune", "--keep", "1", *mem)
    assert "1 remain" in pruned.stdout
    exported = in_process("memory", "export", str(tmp_path / "out.jsonl"), *mem)
    assert exported.returncode == 0 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 1


def test_optimize_with_an_unreachable_memory_server_fails_before_any_work(softmax_task):
    proc = run_cli("optimize", str(softmax_task), "--device", "cpu", "--memory-url", "http://127.0.0.1:9")
    assert_clean_error(proc, "cannot reach the Chroma server", "--no-memory")


def test_an_empty_store_says_it_is_empty(tmp_path):
    """`memory list` on an empty store printed nothing (exit 0), `memory stats` '0 insights'."""
    from accelopt.memory.store import InsightStore

    InsightStore(tmp_path / "empty")  # a store with nothing in it yet
    mem = ["--memory", str(tmp_path / "empty")]
    listing = in_process("memory", "list", *mem)
    assert listing.returncode == 0 and listing.stdout.startswith("no insights in "), listing.stdout
    assert "accelopt memory import FILE" in listing.stdout
    stats = in_process("memory", "stats", *mem)
    assert stats.returncode == 0 and "no insights in " in stats.stdout and "0 insights" not in stats.stdout
