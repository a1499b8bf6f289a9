"""The terminal headline of `eval` / `report`: task names and outcome words stay whole however wide a
long interval makes its column (rich folded them mid-word, and a test reading the table saw
'rmsno' and 'rm' on two lines when a kernel's interval was shown)."""

import io

from rich.console import Console

from accelopt.cli.evaluate import headline_table

CELLS = [
    ["nki_silu", "skipped: NKI unavailable: install neuronx-cc", "-", "-", "-"],
    ["rmsnorm", "optimized (faster)", "1.234x (range over 2 rounds: 1.101x-1.402x, interpreter wall clock)",
     "n/a (CPU)", "interpreter wall"],
    ["fused_add_rmsnorm", "optimized (faster, within noise)", "0.998x (range over 2 rounds: 0.9x-1.1x)",
     "n/a (CPU)", "interpreter wall"],
]


def test_names_and_outcomes_are_never_cut_in_two():
    for width in (80, 100):
        out = io.StringIO()
        Console(file=out, width=width).print(headline_table(CELLS, "suite: s"))
        lines = out.getvalue().splitlines()
        for word in ("nki_silu", "rmsnorm", "fused_add_rmsnorm", "optimized", "skipped:", "unavailable:", "n/a"):
            assert any(word in line for line in lines), (width, word, out.getvalue())
        assert "1.234x" in out.getvalue() and "timer" in out.getvalue()  # every column shown
