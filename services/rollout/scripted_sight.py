"""What the agent has seen so far in an episode, and whether a tool call is justified by it.

A demonstration is honest when every argument the agent writes follows from text it has been
shown: the instruction (at its hint tier) and the tool results as the agent loop showed them
(cut to the loop's character cap). `Sight` collects that text and `Sight.unjustified(call)`
says what, if anything, a call takes from nowhere:

* a path (read_file, edit_file, grep, list_dir, ...) must have been shown: verbatim (a
  `/workspace/` or host prefix of a traceback allowed), as a dotted module name
  (`pkg.mod.Error` shows `pkg/mod.py`), in a list_dir tree, or, for a directory, as the
  folder of a shown path or a name shown as a word (the package `pkg`);
* a line range must hold a line number shown for that file (a grep hit, a traceback frame,
  a numbered listing, a codebase_search range), or start right after one (reading on);
* the words of a grep pattern, a glob, a codebase_search query or a shell command must have
  been shown, apart from the language's and the shell's own vocabulary;
* an edit's `old_string` must be text a numbered listing of that file showed: a read_file
  result, an edit_file result, or source with line numbers in the instruction (tier 3);
* names the agent writes in `backticks`, paths and "line N" in its prose must have been shown.

Only the agent's arguments are judged; `new_string` and the submit message's prose are its
own reasoning about what it read.
"""

from __future__ import annotations

import builtins
import keyword
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass

from etude.common.tool_text import (
    CUT_MARK,
    GREP_HIT,
    NUMBERED_LINE,
    READ_FILE_MAX_LINES,
    READ_ON,
)
from etude.common.toolcalls import ToolCall

WORKSPACE = "/workspace"

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_PIECE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH_TOKEN = re.compile(r"[\w./\-]*[\w\-]")
# A file's name as an instruction writes it: a lower-case extension of a few letters.
_FILE_NAME = re.compile(r"(?<![\w./\-])(?:[\w.\-]+/)*[\w\-]+\.[a-z]{1,4}(?![\w/\-])")
_SEARCH_HIT = re.compile(r"^([^\s:][^:\n]*):([0-9]+)-([0-9]+) \(", re.M)
_FRAME = re.compile(r'File "([^"\n]+)", line ([0-9]+)|([\w./\-]+\.\w+):([0-9]+)')
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_LINE_MENTION = re.compile(r"\blines? ([0-9]+)")
_REGEX_ESCAPE = re.compile(r"\\[A-Za-z]")

# Words any Python programmer writes without having read them in this repository.
LANGUAGE_WORDS = frozenset(
    {w.lower() for w in keyword.kwlist + keyword.softkwlist}
    | {w.lower() for w in dir(builtins) if not w.startswith("_")}
    | {"self", "cls", "py"}
)
# The shell and Python invocations a smoke check is made of.
SHELL_WORDS = frozenset(
    {"python", "python3", "c", "m", "print", "ok", "py_compile", "pytest", "q", "x", "echo"}
)
# Function words a natural-language search query may carry.
QUERY_WORDS = frozenset({
    "a", "an", "the", "of", "in", "on", "for", "to", "is", "are", "be", "by", "with", "and",
    "or", "not", "that", "this", "what", "where", "which", "when", "how", "does", "do",
    "from", "into", "its", "it",
})  # fmt: skip


def normal_path(path: str) -> str:
    """A path the way the workspace tools name it: relative, no `./`, no `/workspace/`."""
    text = path.strip()
    if text == WORKSPACE or text.startswith(WORKSPACE + "/"):
        text = text[len(WORKSPACE) :].lstrip("/")
    text = posixpath.normpath(text or ".")
    return "." if text in ("", ".") else text.removeprefix("./")


def words_of(text: str) -> set[str]:
    """The lower-cased words of a text: each identifier and number, and the pieces of an
    identifier (`test_put_value` → test, put, value; `LFUCache` → lfu, cache)."""
    found: set[str] = set()
    for word in _WORD.findall(text):
        found.add(word.lower())
        for part in word.split("_"):
            found.update(piece.lower() for piece in _PIECE.findall(part))
    return found


@dataclass(frozen=True, slots=True)
class Listing:
    """Numbered lines of one file as the agent was shown them, and where it saw them."""

    path: str
    lines: dict[int, str]
    source: str
    """`read_file`, `edit_file` or `instruction`."""

    def shows(self, text: str) -> bool:
        """True when `text` stands inside a run of consecutive lines of this listing."""
        runs: list[list[str]] = [[]]
        previous = None
        for number in sorted(self.lines):
            if previous is not None and number != previous + 1:
                runs.append([])
            runs[-1].append(self.lines[number])
            previous = number
        return any(text in "\n".join(run) for run in runs if run)


class Sight:
    """Everything the agent has been shown, indexed for the honesty rules."""

    def __init__(self, instruction: str) -> None:
        self.words: set[str] = set()
        self.tokens: set[str] = set()
        """Path-like tokens as shown (normalized)."""
        self.dotted: set[str] = set()
        self.tree_paths: set[str] = set()
        self.line_numbers: dict[str, set[int]] = defaultdict(set)
        self.listings: list[Listing] = []
        self.instruction = instruction
        self.texts: list[str] = []
        """The instruction and every result, as shown."""
        self._take(instruction)
        self._take_instruction_listings(instruction)

    def copy(self) -> Sight:
        """An independent copy, to try what a call would show without having made it."""
        other = Sight.__new__(Sight)
        other.words, other.tokens = set(self.words), set(self.tokens)
        other.dotted, other.tree_paths = set(self.dotted), set(self.tree_paths)
        other.line_numbers = defaultdict(set, {p: set(n) for p, n in self.line_numbers.items()})
        other.listings = list(self.listings)
        other.instruction, other.texts = self.instruction, list(self.texts)
        return other

    # -- what was shown ------------------------------------------------------------------

    def see(self, call: ToolCall, output: str, exit_code: int = 0) -> None:
        """Take in one call's result as the agent was shown it."""
        self._take(output)
        path = normal_path(call.arguments.get("path", "."))
        if call.name == "read_file" and exit_code == 0:
            self._take_listing(path, output, "read_file")
            for number in READ_ON.findall(output):
                self.line_numbers[path].add(int(number))
        elif call.name == "edit_file" and exit_code == 0:
            self._take_listing(path, output, "edit_file")
        elif call.name == "list_dir" and exit_code == 0:
            self._take_tree(output)

    def _take(self, text: str) -> None:
        self.texts.append(text)
        self.words |= words_of(text)
        self.dotted.update(_DOTTED.findall(text))
        for token in _PATH_TOKEN.findall(text):
            self.tokens.add(normal_path(token))
        for found in GREP_HIT.finditer(text):
            self.line_numbers[normal_path(found[1])].add(int(found[2]))
        for found in _SEARCH_HIT.finditer(text):
            path = normal_path(found[1])
            self.line_numbers[path].update((int(found[2]), int(found[3])))
        for found in _FRAME.finditer(text):
            name, number = (found[1], found[2]) if found[1] else (found[3], found[4])
            self.line_numbers[normal_path(name)].add(int(number))

    def _take_listing(self, path: str, output: str, source: str) -> None:
        # A result cut by the agent loop ends inside a line: that line was not shown whole.
        cut = CUT_MARK.search(output)
        text = output[: cut.start()] if cut else output
        rows = text.split("\n")
        if cut:
            rows = rows[:-1]
        lines = {}
        for row in rows:
            numbered = NUMBERED_LINE.match(row)
            if numbered:
                lines[int(numbered[1])] = numbered[2]
        if lines:
            self.listings.append(Listing(path, lines, source))
            self.line_numbers[path].update(lines)

    def _take_instruction_listings(self, text: str) -> None:
        """Numbered source in the instruction belongs to the file named last before it."""
        current: str | None = None
        block: dict[int, str] = {}
        for row in text.split("\n"):
            numbered = NUMBERED_LINE.match(row)
            if numbered and current is not None:
                block[int(numbered[1])] = numbered[2]
                continue
            if block and current is not None:
                self.listings.append(Listing(current, block, "instruction"))
                self.line_numbers[current].update(block)
                block = {}
            for token in _FILE_NAME.findall(row):
                current = normal_path(token)
        if block and current is not None:
            self.listings.append(Listing(current, block, "instruction"))
            self.line_numbers[current].update(block)

    def _take_tree(self, output: str) -> None:
        rows = output.split("\n")
        if not rows or not rows[0].endswith("/"):
            return
        stack = [normal_path(rows[0].rstrip("/"))]
        for row in rows[1:]:
            depth = (len(row) - len(row.lstrip(" "))) // 2
            name = row.strip().split(" -> ")[0]
            if depth < 1 or not name or name.startswith(("…", "(")):
                continue
            del stack[depth:]
            parent = stack[-1]
            path = normal_path(name.rstrip("/") if parent == "." else f"{parent}/{name}")
            self.tree_paths.add(path)
            if name.endswith("/"):
                stack.append(path)

    # -- what follows from it ------------------------------------------------------------

    def has_word(self, word: str) -> bool:
        return word.lower() in self.words

    def has_path(self, path: str) -> bool:
        """A file (or any path) the agent was shown."""
        p = normal_path(path)
        if p == ".":
            return True
        if p in self.tokens or p in self.tree_paths:
            return True
        if any(token.endswith("/" + p) for token in self.tokens):
            return True  # a traceback's absolute path
        return any(_module_path_shown(p, name) for name in self.dotted)

    def has_directory(self, path: str) -> bool:
        p = normal_path(path)
        if p == "." or self.has_path(p):
            return True
        shown = self.tokens | self.tree_paths
        if any(token.startswith(p + "/") or f"/{p}/" in token for token in shown):
            return True
        return any(name.startswith(p.replace("/", ".") + ".") for name in self.dotted)

    def has_module(self, module: str) -> bool:
        path = module.replace(".", "/")
        if module in self.dotted or any(name.startswith(module + ".") for name in self.dotted):
            return True
        return self.has_path(path + ".py") or self.has_path(path + "/__init__.py")

    def lines_of(self, path: str) -> set[int]:
        p = normal_path(path)
        found = set(self.line_numbers.get(p, ()))
        for shown, numbers in self.line_numbers.items():
            if shown != p and shown.endswith("/" + p):
                found |= numbers
        return found

    def shows(self, path: str, text: str, sources: frozenset[str] | None = None) -> bool:
        p = normal_path(path)
        return any(
            listing.path == p
            and (sources is None or listing.source in sources)
            and listing.shows(text)
            for listing in self.listings
        )

    # -- the rules -----------------------------------------------------------------------

    def unjustified(self, call: ToolCall) -> str | None:
        """Why `call` is not justified by what was shown (None when it is)."""
        args = call.arguments
        check = getattr(self, f"_check_{call.name}", None)
        if check is None:
            return f"{call.name}: a tool the demonstrations do not use"
        return check(args)

    def _unseen_words(self, text: str, allowed: frozenset[str] = frozenset()) -> list[str]:
        return sorted(
            w
            for w in {m.lower() for m in _WORD.findall(text)}
            if w not in self.words and w not in LANGUAGE_WORDS and w not in allowed
        )

    def _check_read_file(self, args: dict[str, str]) -> str | None:
        path = args["path"]
        if not self.has_path(path):
            return f"read_file: {path} was not shown"
        if "start_line" not in args and "end_line" not in args:
            return None
        numbers = [args.get("start_line", "1"), args.get("end_line", "1")]
        if not all(n.strip().isdigit() for n in numbers):
            return f"read_file: line numbers {numbers} are not numbers"
        start = int(numbers[0])
        end = int(args["end_line"]) if "end_line" in args else start + READ_FILE_MAX_LINES - 1
        seen = self.lines_of(path)
        if not any(start - 1 <= n <= end for n in seen):
            return f"read_file: no line of {path} in {start}-{end} was shown"
        return None

    def _check_grep(self, args: dict[str, str]) -> str | None:
        unseen = self._unseen_words(_REGEX_ESCAPE.sub(" ", args["pattern"]))
        if unseen:
            return f"grep: pattern words not shown: {', '.join(unseen)}"
        path = args.get("path", ".")
        if not (self.has_directory(path) or self.has_path(path)):
            return f"grep: {path} was not shown"
        return self._check_glob(args.get("glob", ""), "grep")

    def _check_glob(self, glob: str, tool: str) -> str | None:
        unseen = self._unseen_words(glob)
        return f"{tool}: glob words not shown: {', '.join(unseen)}" if unseen else None

    def _check_file_search(self, args: dict[str, str]) -> str | None:
        return self._check_glob(args["glob"], "file_search")

    def _check_list_dir(self, args: dict[str, str]) -> str | None:
        path = args.get("path", ".")
        return None if self.has_directory(path) else f"list_dir: {path} was not shown"

    def _check_codebase_search(self, args: dict[str, str]) -> str | None:
        unseen = self._unseen_words(args["query"], QUERY_WORDS)
        if unseen:
            return f"codebase_search: query words not shown: {', '.join(unseen)}"
        for folder in re.split(r"[,\n]", args.get("target_directories", "")):
            if folder.strip() and not self.has_directory(folder):
                return f"codebase_search: {folder.strip()} was not shown"
        return None

    def _check_edit_file(self, args: dict[str, str]) -> str | None:
        path = args["path"]
        if not self.has_path(path):
            return f"edit_file: {path} was not shown"
        if not self.shows(path, args["old_string"]):
            return f"edit_file: old_string was not shown in a listing of {path}"
        return None

    def _check_run_terminal_command(self, args: dict[str, str]) -> str | None:
        command = args["command"]
        for imported in re.findall(r"\bimport ([\w., ]+)", command):
            for module in (m.strip() for m in imported.split(",")):
                if module and not self.has_module(module):
                    return f"run_terminal_command: module {module} was not shown"
        for token in _PATH_TOKEN.findall(command):
            if "/" in token and not self.has_path(token):
                return f"run_terminal_command: {token} was not shown"
        unseen = self._unseen_words(command, SHELL_WORDS)
        if unseen:
            return f"run_terminal_command: words not shown: {', '.join(unseen)}"
        return None

    def _check_submit(self, args: dict[str, str]) -> str | None:
        return self.unjustified_prose(args["message"])

    def unjustified_prose(self, prose: str) -> str | None:
        """Names in backticks, paths and line numbers the prose mentions must have been shown."""
        for span in _BACKTICKED.findall(prose):
            unseen = self._unseen_words(span)
            if unseen:
                return f"prose names `{span}`, not shown"
        for token in _PATH_TOKEN.findall(_BACKTICKED.sub(" ", prose)):
            if "/" in token and not self.has_path(token):
                return f"prose names {token}, not shown"
        for number in _LINE_MENTION.findall(prose):
            if number not in self.words:
                return f"prose names line {number}, not shown"
        return None


def _module_path_shown(path: str, dotted: str) -> bool:
    """`pkg/mod.py` or `pkg/__init__.py` from a shown `pkg.mod.Name`."""
    if not path.endswith(".py"):
        return False
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return dotted == module or dotted.startswith(module + ".")
