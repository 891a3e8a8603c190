"""The dialect description and a quote-aware CSV tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CsvError, CsvFormatError

_LINE_BREAKS = "\r\n"


@dataclass(frozen=True)
class Dialect:
    """How a CSV text is written.

    With ``doublequote`` a quote inside a quoted field is written twice (``'a ""b"" c'``);
    with an ``escapechar`` the following character is taken literally (``'a \\"b\\" c'``).
    ``line_terminator`` is informational: the parser accepts ``\\n``, ``\\r\\n`` and ``\\r``.
    """

    delimiter: str = ","
    quotechar: str = '"'
    escapechar: str | None = None
    doublequote: bool = True
    skip_initial_space: bool = False
    line_terminator: str = "\n"
    has_header: bool = False

    def __post_init__(self) -> None:
        for name in ("delimiter", "quotechar"):
            if len(getattr(self, name)) != 1:
                raise CsvError(f"{name} must be a single character")
        if self.escapechar is not None and len(self.escapechar) != 1:
            raise CsvError("escapechar must be a single character or None")
        special = [self.delimiter, self.quotechar, self.escapechar]
        if any(ch is not None and ch in _LINE_BREAKS for ch in special):
            raise CsvError("delimiter, quotechar and escapechar cannot be line breaks")
        if len({ch for ch in special if ch is not None}) != sum(ch is not None for ch in special):
            raise CsvError("delimiter, quotechar and escapechar must all differ")
        if self.line_terminator not in ("\n", "\r\n", "\r"):
            raise CsvError(f"unsupported line terminator {self.line_terminator!r}")


@dataclass(frozen=True)
class Row:
    """One record and the physical line on which it starts (1-based)."""

    line: int
    fields: list[str]


_START, _FIELD, _QUOTED, _AFTER_QUOTE = range(4)


class _Tokenizer:
    """A character-level state machine; one instance parses one text."""

    def __init__(self, text: str, dialect: Dialect) -> None:
        self.text = text
        self.d = dialect
        self.rows: list[Row] = []
        self.fields: list[str] = []
        self.buf: list[str] = []
        self.state = _START
        self.line = 1
        self.row_line = 1

    def _end_field(self) -> None:
        self.fields.append("".join(self.buf))
        self.buf = []
        self.state = _START

    def _end_row(self) -> None:
        # A physical line with no characters at all is skipped rather than read as [""].
        if self.fields or self.state != _START:
            self._end_field()
            self.rows.append(Row(self.row_line, self.fields))
        self.fields = []
        self.state = _START

    def _line_break_length(self, i: int) -> int:
        return 2 if self.text.startswith("\r\n", i) else 1

    def run(self) -> list[Row]:
        text, d = self.text, self.d
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if self.state == _QUOTED:
                if ch == d.escapechar and i + 1 < n:
                    self.buf.append(text[i + 1])
                    i += 2
                elif ch == d.quotechar:
                    if d.doublequote and text.startswith(d.quotechar, i + 1):
                        self.buf.append(ch)
                        i += 2
                    else:
                        self.state = _AFTER_QUOTE
                        i += 1
                elif ch in _LINE_BREAKS:
                    step = self._line_break_length(i)
                    self.buf.append(text[i : i + step])
                    self.line += 1
                    i += step
                else:
                    self.buf.append(ch)
                    i += 1
                continue
            if ch in _LINE_BREAKS:
                self._end_row()
                i += self._line_break_length(i)
                self.line += 1
                self.row_line = self.line
                continue
            if ch == d.delimiter:
                self._end_field()
            elif self.state == _AFTER_QUOTE:
                raise CsvFormatError(self.line, f"unexpected {ch!r} after closing quote")
            elif self.state == _START and ch == " " and d.skip_initial_space:
                pass
            elif self.state == _START and ch == d.quotechar:
                self.state = _QUOTED
            elif ch == d.escapechar and i + 1 < n and text[i + 1] not in _LINE_BREAKS:
                self.buf.append(text[i + 1])
                self.state = _FIELD
                i += 1
            else:
                self.buf.append(ch)
                self.state = _FIELD
            i += 1
        if self.state == _QUOTED:
            raise CsvFormatError(self.row_line, "unterminated quoted field")
        self._end_row()
        return self.rows


def parse_rows(text: str, dialect: Dialect | None = None) -> list[Row]:
    """Split ``text`` into rows of fields according to ``dialect`` (default: plain CSV).

    Quoted fields may contain delimiters, quotes (doubled or escaped) and line breaks;
    blank lines between records are skipped.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    return _Tokenizer(text, dialect or Dialect()).run()
