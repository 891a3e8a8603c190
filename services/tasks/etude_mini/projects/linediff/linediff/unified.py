"""Grouping opcodes into hunks and writing them in ``diff -u`` format."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .myers import Opcode, diff_opcodes

NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True)
class Hunk:
    """A run of changes with surrounding context.

    ``old_index``/``new_index`` are 0-based positions of the hunk's first line; for an empty
    side they are the position where lines are inserted. ``lines`` pairs a marker (``" "``,
    ``"-"`` or ``"+"``) with the line's text, including its newline when it has one.
    """

    old_index: int
    old_count: int
    new_index: int
    new_count: int
    lines: tuple[tuple[str, str], ...]

    @property
    def old_lines(self) -> list[str]:
        return [text for marker, text in self.lines if marker != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for marker, text in self.lines if marker != "-"]

    def header(self) -> str:
        old = _format_range(self.old_index, self.old_count)
        new = _format_range(self.new_index, self.new_count)
        return f"@@ -{old} +{new} @@"


@dataclass(frozen=True)
class Patch:
    """The hunks that turn one file into another, with the file names from the headers."""

    old_name: str = "a"
    new_name: str = "b"
    hunks: tuple[Hunk, ...] = field(default=())

    def __str__(self) -> str:
        return format_patch(self)


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping line endings; a final line may lack its newline."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _format_range(index: int, count: int) -> str:
    # GNU diff names an empty range by the line *before* it, so "-0,0" means "at the top".
    start = index + 1 if count else index
    return str(start) if count == 1 else f"{start},{count}"


def group_opcodes(opcodes: list[Opcode], context: int = 3) -> list[list[Opcode]]:
    """Split opcodes into groups of changes separated by more than ``2 * context`` equal lines.

    Equal runs at the edges of each group are trimmed to ``context`` lines.
    """
    if context < 0:
        raise ValueError("context must not be negative")
    if all(op.tag == "equal" for op in opcodes):
        return []
    codes = list(opcodes)
    first, last = codes[0], codes[-1]
    if first.tag == "equal":
        size = min(context, first.a_end - first.a_start)
        codes[0] = Opcode("equal", first.a_end - size, first.a_end, first.b_end - size, first.b_end)
    if last.tag == "equal":
        size = min(context, last.a_end - last.a_start)
        codes[-1] = replace(last, a_end=last.a_start + size, b_end=last.b_start + size)
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for op in codes:
        if op.tag == "equal" and op.a_end - op.a_start > 2 * context:
            group.append(replace(op, a_end=op.a_start + context, b_end=op.b_start + context))
            groups.append(group)
            group = [replace(op, a_start=op.a_end - context, b_start=op.b_end - context)]
        else:
            group.append(op)
    if any(op.tag != "equal" for op in group):
        groups.append(group)
    return groups


def make_hunks(old: list[str], new: list[str], context: int = 3) -> tuple[Hunk, ...]:
    """Hunks describing how the ``old`` lines become the ``new`` lines."""
    hunks = []
    for group in group_opcodes(diff_opcodes(old, new), context):
        lines: list[tuple[str, str]] = []
        for op in group:
            if op.tag == "equal":
                lines.extend((" ", text) for text in old[op.a_start : op.a_end])
                continue
            lines.extend(("-", text) for text in old[op.a_start : op.a_end])
            lines.extend(("+", text) for text in new[op.b_start : op.b_end])
        first, last = group[0], group[-1]
        hunks.append(
            Hunk(
                old_index=first.a_start,
                old_count=last.a_end - first.a_start,
                new_index=first.b_start,
                new_count=last.b_end - first.b_start,
                lines=tuple(lines),
            )
        )
    return tuple(hunks)


def make_patch(
    old: str, new: str, old_name: str = "a", new_name: str = "b", context: int = 3
) -> Patch:
    """Compare two texts line by line."""
    return Patch(old_name, new_name, make_hunks(split_lines(old), split_lines(new), context))


def format_patch(patch: Patch) -> str:
    """Render ``patch`` as ``diff -u`` does; an empty patch renders as the empty string."""
    if not patch.hunks:
        return ""
    out = [f"--- {patch.old_name}\n", f"+++ {patch.new_name}\n"]
    for hunk in patch.hunks:
        out.append(hunk.header() + "\n")
        for marker, text in hunk.lines:
            out.append(marker + text)
            if not text.endswith("\n"):
                out.append(f"\n{NO_NEWLINE}\n")
    return "".join(out)


def unified_diff(
    old: str, new: str, old_name: str = "a", new_name: str = "b", context: int = 3
) -> str:
    """The unified diff between two texts, e.g. ``unified_diff(before, after, "x.py", "x.py")``."""
    return format_patch(make_patch(old, new, old_name, new_name, context))
