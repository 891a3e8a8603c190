"""CSV dialect sniffing, quote-aware parsing and column type inference."""

from .errors import CsvError, CsvFormatError, SniffError
from .parser import Dialect, Row, parse_rows
from .sniffer import RowIssue, Table, detect_line_terminator, detect_quote, read, sniff
from .types import ColumnType, classify, convert, infer_type

__all__ = [
    "ColumnType",
    "CsvError",
    "CsvFormatError",
    "Dialect",
    "Row",
    "RowIssue",
    "SniffError",
    "Table",
    "classify",
    "convert",
    "detect_line_terminator",
    "detect_quote",
    "infer_type",
    "parse_rows",
    "read",
    "sniff",
]
