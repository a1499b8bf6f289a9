"""Issue 67: one resolution of a run's settings at every door. Defaults, then accelopt.toml (or
$ACCELOPT_CONFIG), then the ACCELOPT_* environment, then the door's own input; run.json's
`sources` says where each came from (graph/config.py)."""

import pytest

from accelopt.graph.config import load_context, resolve_context
from accelopt.nodes.context import RunContext


@pytest.fixture
def configured(tmp_path, monkeypatch):
    """A folder with accelopt.toml ([run] and a default model), and ACCELOPT_MODEL over its model."""
    for name in ("ACCELOPT_CONFIG", "ACCELOPT_BASE_URL", "ACCELOPT_EXECUTOR_MODEL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "accelopt.toml").write_text('[run]\nbeams = 3\niterations = 5\n[models.default]\n'
                                           'model = "vllm:from-toml"\nbase_url = "http://toml:8000/v1"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACCELOPT_MODEL", "vllm:from-env")


def test_every_door_resolves_the_file_then_the_environment_then_its_own_keys(configured):
    for given in ({"iterations": 1}, RunContext(iterations=1)):  # a dict, or the fields a RunContext was given
        ctx = resolve_context(given)
        assert (ctx.beams, ctx.iterations, ctx.model, ctx.base_url) == (3, 1, "vllm:from-env", "http://toml:8000/v1")
        sources = ctx.sources()
        assert sources["beams"] == "accelopt.toml" and sources["iterations"] == "context"
        assert sources["model"] == "$ACCELOPT_MODEL" and sources["base_url"] == "accelopt.toml"
        assert sources["fixes"] == "default"
    cli, _ = load_context(None, iterations=2, model="vllm:from-flag")
    assert (cli.beams, cli.iterations, cli.model) == (3, 2, "vllm:from-flag")
    assert cli.sources()["model"] == "flag" and resolve_context(cli) is cli  # resolved once, by its door
    named = resolve_context({"model": "tuner", "role_models": {"executor": {"model": "vllm:coder"}}})
    assert named.model == "tuner" and named.model_spec("executor").model == "coder"


def test_a_plan_review_asked_for_without_a_schedule_runs_beam(configured):
    """pipeline (the default) leaves no pause to review plans in: a review asked for takes beam."""
    assert resolve_context({"review_plans": True}).schedule == "beam"
    assert resolve_context({}).schedule == "pipeline"
    assert resolve_context({"review_plans": True, "schedule": "overlap"}).schedule == "overlap"
