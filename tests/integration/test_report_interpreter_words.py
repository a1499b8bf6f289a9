"""The interpreter rule in the report: on the CPU interpreter a run's times are an emulation's wall
clock, so report.html, its figures and the terminal's headline make no performance claim there (no
kernel is best, faster or beaten, no figure a speedup): the kept kernel is the beam head and its
figure the baseline's wall time over its own, in the CLI's words (graph.progress.head_word,
interpreter_rule). A GPU run's page keeps its words."""

import html
import re
from pathlib import Path

import pytest

from accelopt.evals.reporting import report_plots
from accelopt.evals.reporting.report import build_report, headline, load_rows, suite_figures
from accelopt.evals.reporting.rows import VERDICTS
from accelopt.graph.progress import interpreter_rule
from tests.integration.test_report import DEMO_STEPS, write_interpreter_run, write_run

# a performance claim, in any of its words
CLAIM = re.compile(r"\b(best|beat|beats|beaten|faster|slower|speedups?|optimized)\b|no faster kernel", re.I)
# the rule itself, as the CLI states it ("nothing is called faster or slower"), may name what it forbids
RULE = (interpreter_rule().removeprefix("CPU interpreter: "), VERDICTS["interpreter"])


def _visible(page: Path) -> str:
    """What a reader of the page sees: its text and its figures' captions, without the style sheet,
    tags or attributes (class names such as o-faster, file names such as speedup_per_iteration)."""
    text = page.read_text().split("</style>", 1)[1]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def _claims(text: str) -> list[str]:
    for sentence in RULE:
        text = text.replace(sentence, "")
    return [text[max(0, m.start() - 60):m.end() + 60] for m in CLAIM.finditer(text)]


@pytest.fixture
def figure_text(monkeypatch):
    """Every text of every figure drawn: titles, axis labels, legends, annotations."""
    texts: list[str] = []
    real = report_plots._png

    def grab(fig):
        for ax in fig.axes:
            texts.extend([ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts])
            if ax.get_legend() is not None:
                texts.extend(t.get_text() for t in ax.get_legend().get_texts())
        return real(fig)

    monkeypatch.setattr(report_plots, "_png", grab)
    return texts


def _interpreter_suite(root: Path) -> Path:
    """Two interpreter runs: one whose beam head is a candidate two steps from the baseline (lineage,
    workloads, diff), one whose beam head is still the baseline (an older record says `faster`)."""
    write_interpreter_run(root / "demo", DEMO_STEPS)
    write_run(root / "flat", speedup=None, timer="interpreter_wall", rounds=2)
    return root


def test_an_interpreter_page_and_its_figures_make_no_performance_claim(tmp_path, figure_text):
    out = _interpreter_suite(tmp_path / "cpu")
    page = build_report(out)
    text = _visible(page)
    assert _claims(text) == [], _claims(text)
    # what it says instead: the beam head, the ratio of wall times, the rule that ranked the kernel
    assert "Lineage of the beam head" in text and "Beam head against the baseline" in text
    assert "beam head i2.m0.p1.k0, 1.149x the baseline's CPU interpreter wall time over its own" in text
    assert "The beam head is still the baseline: no candidate ranked above it" in text
    assert "baseline/kernel wall time (CPU interpreter)" in text and "beam head µs" in text
    assert "geomean of the baseline's CPU Triton-interpreter wall time over the beam head's (not performance)" in text
    assert "tasks verified on the CPU interpreter (no speed verdict) / total 2 / 2" in text
    assert RULE[0] in text
    # every figure: titles, axes, legends and captions alike
    for key in ("speedup_per_iteration", "per_task", "fast_p", "candidates_demo", "lineage_demo", "workloads_demo"):
        assert f"alt='{key}'" in page.read_text(), key
    drawn = " | ".join(t for t in figure_text if t)
    assert len(figure_text) > 20 and _claims(drawn) == [], _claims(drawn)
    assert "the run's beam head after each iteration" in drawn and "baseline/kernel wall time" in drawn


def test_the_headline_names_an_interpreter_figure_as_wall_time(tmp_path):
    rows = load_rows(_interpreter_suite(tmp_path / "cpu"))
    from accelopt.evals.reporting.report import headline_columns

    columns = headline_columns(rows)
    assert columns[2] == "baseline/kernel wall time (interval)"  # was "speedup (interval)"
    cells, lines = headline(rows, suite_figures(rows))
    shown = " ".join(columns + [c for row in cells for c in row[2:]] + lines)
    assert _claims(shown) == [], _claims(shown)
    assert any("over the beam head's: " in line and "(not performance)" in line for line in lines), lines


def test_an_interpreter_run_that_cost_money_has_no_dollars_per_speedup(tmp_path):
    write_run(tmp_path / "e" / "a", speedup=1.5, interval=(1.4, 1.6), rounds=2, cost=0.12, timer="interpreter_wall")
    rows = load_rows(tmp_path / "e")
    assert suite_figures(rows)["usd_per_pct_geomean"] is None
    # and its cost figure is the beam head's ratio of wall times, against cost
    text = _visible(build_report(tmp_path / "e"))
    assert "The beam head (baseline/kernel wall time) against LLM cost" in text and _claims(text) == []


def test_a_gpu_page_keeps_its_words(tmp_path, figure_text):
    out = tmp_path / "gpu"
    write_run(out / "fast", speedup=1.25, interval=(1.21, 1.3), vs_tc=0.8, cost=0.2)
    write_run(out / "flat", speedup=None, vs_tc=0.9)
    text = _visible(build_report(out))
    for words in ("tasks where no faster kernel was found", "geomean speedup (GPU time (CUDA))",
                  "speedup over the baseline", "best µs", "Lineage of the best kernel", "Speedup per workload",
                  "Best kernel against the baseline", "no candidate beat it", "Best speedup per iteration",
                  "best i1.m0.p0.k0 at 1.250x of the baseline", "fast_p curve"):
        assert words in text, words
    assert "beam head" not in text and "wall time" not in text
    drawn = " | ".join(figure_text)
    assert "the run's best after each iteration" in drawn and "speedup over the baseline" in drawn
    rows = load_rows(out)
    from accelopt.evals.reporting.report import headline_columns

    assert headline_columns(rows)[2] == "speedup (interval)"
    assert suite_figures(rows)["usd_per_pct_geomean"] is not None


def test_a_mixed_page_names_both(tmp_path):
    write_run(tmp_path / "e" / "gpu", speedup=2.0, interval=(1.9, 2.1))
    write_interpreter_run(tmp_path / "e" / "cpu", DEMO_STEPS)
    rows = load_rows(tmp_path / "e")
    from accelopt.evals.reporting.report import headline_columns

    assert headline_columns(rows)[2] == "speedup, or on the CPU interpreter baseline/kernel wall time (interval)"
    text = _visible(build_report(tmp_path / "e"))
    assert "tasks where no faster kernel was found" in text and "geomean speedup (GPU time (CUDA))" in text
    assert "tasks verified on the CPU interpreter (no speed verdict there) 1" in text
    assert "geomean of the baseline's CPU Triton-interpreter wall time over the beam head's" in text
    # the interpreter task's own section makes no claim
    section = text.split("Task: cpu", 1)[1].split("Task: gpu", 1)[0]
    assert _claims(section) == [], _claims(section)
