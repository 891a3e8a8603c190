"""The `.gitignore` subset and the glob syntax grep and file_search share with it."""

from __future__ import annotations

import pytest

from etude.common.gitignore import compile_glob, parse_line


@pytest.mark.parametrize(
    ("line", "path", "is_dir", "matches"),
    [
        ("*.log", "a/b/x.log", False, True),
        ("/top.txt", "sub/top.txt", False, False),
        ("build/", "build", False, False),
        ("build/", "a/build", True, True),
        ("a/**/b", "a/b", True, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("**/gen/**", "x/gen/y.py", False, True),
        ("gen/**", "gen", True, False),
        ("[a-c]?.txt", "b1.txt", False, True),
        ("[!a-c].txt", "d.txt", False, True),
        ("[!a-c].txt", "a.txt", False, False),
        ("\\#hash", "#hash", False, True),
        ("a*", "ab/c", False, False),
    ],
)
def test_gitignore_patterns(line, path, is_dir, matches):
    pattern = parse_line(line)
    assert pattern is not None
    assert pattern.matches(path, is_dir) is matches


def test_gitignore_rules_rebase_onto_an_ancestor():
    assert parse_line("*.tmp").rebased("src/pkg") == "/src/pkg/**/*.tmp"
    assert parse_line("!/keep/").rebased("a[1]") == "!/a\\[1]/keep/"
    assert parse_line("x/y").rebased("") == "/x/y"
    assert parse_line("# comment") is None and parse_line("   ") is None


def test_globs_without_a_slash_match_names_at_any_depth():
    assert compile_glob("*.py").matches("a/b/c.py", is_dir=False)
    assert not compile_glob("src/*.py").matches("src/a/b.py", is_dir=False)
    assert compile_glob("./src/**").matches("src/a/b.py", is_dir=False)
