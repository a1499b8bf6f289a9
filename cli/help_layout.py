"""`--help` that reads whole at 80 columns (cli/app.py calls `fit_help_to_terminal` where it builds the app).

typer's rich help lays options out in six columns (name, short name, `--no-` name, its short
name, type, help): at 80 columns they did not fit, and rich cut names (`--learn-from-interpre…`),
split metavars mid-word (`<default|max-aut` / `otune-no-cudagra`) and cut help words. Its command
list and later paragraphs kept the docstrings' hard line breaks (ragged text). Here, each option
is one name cell (`-B, --beams <int>`) beside its help, wrapped at words in the width the terminal
has; a name cell too wide for its column stands on its own line, its help below, as click does.
Light, like cli/options.py: typer and rich only, so `accelopt --help` stays fast.
"""

from __future__ import annotations

import inspect
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

NAME_COLUMN_MAX = 30  # a name cell wider than this stands on its own line, its help under it


def _reflow(text: str) -> str:
    """Single line breaks (a docstring's) joined: rich wraps the paragraph to the terminal. A
    paragraph marked with \\b keeps its lines, as typer and click have it."""
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n"))
                       for p in inspect.cleandoc(text).split("\n\n"))


def _name_cell(param: Any, ctx: Any, rich_utils: Any) -> Text:
    """`-B, --beams <int>`, `--torch-compile / --no-torch-compile`, or an argument's name and type."""
    from typer.core import TyperArgument

    if isinstance(param, TyperArgument):
        names = [param.display_name_raw + ("..." if param.metavar is None and param.nargs != 1 else "")]
    else:
        names = [", ".join(sorted(param.opts, key=lambda o: o.startswith("--")))]
        if param.secondary_opts:
            names.append("/ " + ", ".join(param.secondary_opts))
    cell = rich_utils.highlighter(Text(" ".join(names)))
    shown = None if getattr(param, "is_flag", False) else param.display_type_rich(ctx=ctx)  # a flag takes no value
    span = param._get_number_range_help_str() if hasattr(param, "_get_number_range_help_str") else None
    if shown or span:
        cell.append(" ")
        cell.append((shown or "") + (rich_utils.RANGE_STRING.format(span) if span else ""),
                    style=rich_utils.STYLE_TYPES)
    return cell


def _options_panel(rich_utils: Any) -> Any:
    def print_options_panel(*, name: str, params: list, ctx: Any, markup_mode: Any, console: Any) -> None:
        if not params:
            return
        cells = [(_name_cell(p, ctx, rich_utils),
                  rich_utils._get_parameter_help(param=p, ctx=ctx, markup_mode=markup_mode)) for p in params]
        fitting = [c.cell_len for c, _ in cells if c.cell_len <= NAME_COLUMN_MAX]
        column = max(fitting or [0])
        parts: list[RenderableType] = []
        grid: Table | None = None
        for cell, help_ in cells:
            if cell.cell_len > column:  # its own line (wrapped at its blanks if even wider than the panel)
                parts.append(cell)
                cell = Text("")
            if grid is None or not parts or parts[-1] is not grid:
                grid = Table.grid(padding=(0, 2))
                grid.add_column(width=column, no_wrap=True)
                grid.add_column(ratio=1)
                parts.append(grid)
            grid.add_row(cell, help_)
        console.print(Panel(Group(*parts), border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                            title_align=rich_utils.ALIGN_OPTIONS_PANEL))

    return print_options_panel


def fit_help_to_terminal() -> None:
    """Lay typer's rich help out for the terminal's own width (the width rich reads from it; no
    wider). A typer whose help is built otherwise is left as it is: its help reads as before."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich: click's plain help, which wraps itself
        return
    needed = ("_print_options_panel", "_get_parameter_help", "_make_command_help", "_fix_linebreaks", "highlighter",
              "STYLE_TYPES", "RANGE_STRING", "STYLE_OPTIONS_PANEL_BORDER", "ALIGN_OPTIONS_PANEL")
    if getattr(rich_utils, "_accelopt_fitted", False) or not all(hasattr(rich_utils, n) for n in needed):
        return
    wanted = {"name", "params", "ctx", "markup_mode", "console"}
    if set(inspect.signature(rich_utils._print_options_panel).parameters) != wanted:
        return
    make_command_help = rich_utils._make_command_help
    fix_linebreaks = rich_utils._fix_linebreaks

    def command_help(*, help_text: str, markup_mode: Any) -> Any:  # the command list: a docstring's lines joined
        return make_command_help(help_text=_reflow(help_text), markup_mode=markup_mode)

    def later_paragraphs(paragraphs: list[str], markup_mode: Any) -> str:  # a command's help after its first line
        return fix_linebreaks([_reflow(p) for p in paragraphs], markup_mode)

    rich_utils._print_options_panel = _options_panel(rich_utils)
    rich_utils._make_command_help = command_help
    rich_utils._fix_linebreaks = later_paragraphs
    setattr(rich_utils, "_accelopt_fitted", True)  # noqa: B010 - a mark on another module
