"""Exceptions raised while sniffing or parsing CSV text."""


class CsvError(ValueError):
    """Base class for every error raised by this package."""


class CsvFormatError(CsvError):
    """The text breaks the dialect's quoting rules (unterminated quote, stray characters)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class SniffError(CsvError):
    """The sample does not give enough evidence to determine a dialect."""
