"""The CLI answers at once and says what it takes: loading the app imports no heavy package,
`--version`, defaults shown in help, help on every option, the same run flags on optimize and eval."""

import dataclasses
import subprocess
import sys

import typer
from typer.testing import CliRunner

from accelopt.cli import options
from accelopt.cli.app import app
from accelopt.nodes.context import RunContext

HEAVY = {"openai", "langchain_core", "langchain_openai", "langgraph", "langsmith", "httpx", "torch", "triton",
         "chromadb", "sentence_transformers", "numpy", "pydantic"}


def test_loading_the_cli_imports_no_heavy_package():
    """`accelopt --help` must not pay for LangGraph, LangChain, openai, torch or Chroma (seconds):
    the commands import them after their arguments are checked."""
    code = ("import accelopt.cli.app, sys; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {HEAVY!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"imported by `import accelopt.cli.app`: {proc.stdout}"


def test_help_runs_without_a_heavy_import():
    code = ("import sys; sys.argv = ['accelopt', '--help']\n"
            "from accelopt.cli.app import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & {HEAVY!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:] + proc.stderr


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("accelopt "), result.stdout


def _command(name: str):
    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


def test_the_defaults_shown_are_run_contexts():
    defaults = {f.name: f.default for f in dataclasses.fields(RunContext)}
    assert {k: defaults[k] for k in options.SHOWN_DEFAULTS} == options.SHOWN_DEFAULTS
    shown = {p.name: p.show_default for p in _command("optimize").params}
    for name in ("beams", "plans", "samples", "fixes", "iterations"):
        assert str(shown[name]).startswith(str(defaults[name])), name
    result = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert result.exit_code == 0
    for text in ("default: (2)", "default: (3)", "(2; 1 with the tuner)"):
        assert text in result.stdout, text


def test_every_eval_option_has_help_and_eval_takes_optimizes_run_flags():
    evaluate, optimize = _command("eval"), _command("optimize")
    assert all(p.help for p in evaluate.params if p.name != "help"), \
        [p.name for p in evaluate.params if not p.help]
    eval_flags = {o for p in evaluate.params for o in p.opts}
    only_optimize = {o for p in optimize.params for o in p.opts} - eval_flags
    assert only_optimize <= {"task_dir", "--run-dir", "--create-memory", "--seed-capture", "--review-plans"}, only_optimize  # one run's own
    for flag in ("--max-tokens", "--max-wall", "--eval-timeout", "--memory-url", "--embedder", "--planner-model",
                 "--executor-model", "--fixer-model", "--summarizer-model", "--planner-base-url", "--no-preflight"):
        assert flag in eval_flags, flag


def test_context_flags_map_the_cli_names_to_run_context_fields():
    from pathlib import Path

    flags = options.context_flags(memory=Path("m"), no_memory=True, no_preflight=True, max_cost=1.5, max_wall=60.0,
                                  eval_timeout=30.0, learn_from_interpreter=True, beams=3)
    assert flags == {"beams": 3, "memory_dir": "m", "use_memory": False, "preflight": False, "max_cost_usd": 1.5,
                     "max_wall_s": 60.0, "eval_timeout_s": 30.0, "learn_from_interpreter": True}
    fields = {f.name for f in dataclasses.fields(RunContext)}
    assert set(flags) <= fields
    unset = options.context_flags(memory=None, no_memory=False, no_preflight=False, max_cost=None, max_wall=None,
                                  eval_timeout=None)
    assert all(v is None for v in unset.values())  # a flag not given: the config file or the default decides


def test_the_commands_an_interrupt_prints(monkeypatch):
    from pathlib import Path

    from accelopt.cli.interrupt import rerun_command, resume_command

    assert resume_command(Path("runs/my run")) == "accelopt resume 'runs/my run'"
    monkeypatch.setattr(sys, "argv", ["/x/accelopt", "eval", "triton", "-T", "2"])
    assert rerun_command(Path("runs/eval-1")) == "accelopt eval triton -T 2 --out runs/eval-1"
    monkeypatch.setattr(sys, "argv", ["accelopt", "eval", "triton", "--out=o"])
    assert rerun_command(Path("o")) == "accelopt eval triton --out=o"


def test_review_plans_in_the_terminal_runs_all_drops_by_id_or_skips(monkeypatch):
    from accelopt.cli import app as cli

    plans = [{"id": "i1.m0.p0", "parent_id": "baseline", "title": "BLOCK 256 -> 512"},
             {"id": "i1.m0.p1", "parent_id": "baseline", "title": "num_warps 4 -> 8"}]
    for answer, kept in (("", ["i1.m0.p0", "i1.m0.p1"]), ("i1.m0.p1", ["i1.m0.p0"]), ("skip", []),
                         ("i9.m9.p9", ["i1.m0.p0", "i1.m0.p1"])):
        monkeypatch.setattr(cli.typer, "prompt", lambda *a, _answer=answer, **k: _answer)
        assert [p["id"] for p in cli._ask_plans(plans)] == kept, answer


def test_every_bracketed_literal_of_a_help_text_is_shown_in_help():
    """Rich reads `[word]` in a help text as markup and drops it (`[cluster]` vanished from
    `optimize --help`): such text must be escaped (`\\[cluster]`). Every command's and option's
    help is checked, so new ones are covered."""
    import re

    def commands(command, path):
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from commands(sub, [*path, name])

    checked = 0
    for path, command in commands(typer.main.get_command(app), []):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        literals = {" ".join(m.split()) for text in texts for m in re.findall(r"\[[^\]]*\]", text)}
        if not literals:
            continue
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
        assert result.exit_code == 0, result.output
        shown = " ".join(result.stdout.replace("│", " ").split())  # words, not the table's wrapped lines
        assert [lit for lit in sorted(literals) if lit not in shown] == [], f"accelopt {' '.join(path)} --help"
        checked += len(literals)
    assert checked  # the walk found the commands' help texts


def test_the_modes_the_cli_offers_are_the_harness_and_run_contexts():
    """The CLI spells the mode lists out (its top imports only typer and rich); they must not drift
    from what the comparator and RunContext accept."""
    from typing import get_args

    from accelopt.tools.harness.reference_kernel import COMPILE_MODES, CompileMode
    from accelopt.tools.inductor_capture import MODES

    assert get_args(options.CompileModeName) == COMPILE_MODES == get_args(CompileMode)
    assert set(get_args(options.SeedModeName)) == set(MODES)
