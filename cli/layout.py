"""Text that reads whole at 80 columns: commands a user pastes, and paths in a table's cell.

Light on purpose (the standard library only): the CLI's help must not import more.
"""

from __future__ import annotations

import shlex

CONTINUATION = " \\"  # a shell's line continuation: the lines paste and run as one command


def shell_command(words: list[str], width: int = 80, indent: int = 4) -> list[str]:
    """A command as lines of at most `width` columns that paste into a shell and run as one: each
    line but the last ends with ` \\`, continuation lines indented two more. A word too long for a
    line is cut mid-word, its next part at column 0 (a backslash-newline inside a word joins it
    again), unless it is quoted (a quoted word stands whole on its own line)."""
    lines: list[str] = []
    line = " " * indent
    room = width - len(CONTINUATION)
    for word in (shlex.quote(w) for w in words):
        gap = "" if line.isspace() or line == "" else " "
        if len(line) + len(gap) + len(word) <= room:
            line += gap + word
            continue
        if line.strip():
            lines.append(line + CONTINUATION)
            line = " " * (indent + 2)
        if len(line) + len(word) <= room or "'" in word:
            line += word
            continue
        while len(line) + len(word) > room:  # a long path: cut, rejoined by the shell
            cut = room - len(line)
            lines.append(line + word[:cut] + "\\")
            line, word = "", word[cut:]
        line += word
    lines.append(line)
    return lines


def fold_at_slashes(text: str, width: int) -> str:
    """Each word of `text` longer than `width` broken after a `/` (a path, on lines of at most
    `width` where its parts allow), so a table folds it between its folders, not mid-name."""
    words = []
    for word in text.split(" "):
        if len(word) <= width or "/" not in word:
            words.append(word)
            continue
        parts, line = [], ""
        for piece in word.replace("/", "/\0").split("\0"):
            if line and len(line) + len(piece) > width:
                parts.append(line)
                line = ""
            line += piece
        words.append("\n".join([*parts, line] if line else parts))
    return " ".join(words)
