"""Opening the projects users give by path: directories and sdists, named as their
metadata names them, with errors a user can act on."""

from __future__ import annotations

import subprocess

import pytest

from etude.tasks.synth.sources import SourceError, opened, project_name, source_of
from etude.tasks.task import Task
from tests.tasks.layouts import COLORPARSE, TEXTBITS, UNITCONV, tar_sdist, write, zip_sdist


def test_an_sdist_is_named_by_its_metadata_not_its_file(tmp_path):
    archive = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    with opened(archive) as project:
        assert project.name == "textbits"
        assert project.origin["kind"] == "sdist" and project.origin["file"] == "tb-1.2.0.tar.gz"
        assert "src/textbits/core.py" in project.source_files
        root = project.root
    assert not root.exists()  # unpacked only while in use


def test_a_zip_sdist_named_by_pkg_info(tmp_path):
    with opened(zip_sdist(tmp_path, "unitconv-0.1", UNITCONV)) as project:
        assert project.name == "unitconv"
        assert "setup.py" not in project.source_files  # packaging, not the library


def test_a_directory_named_by_setup_cfg(tmp_path):
    with opened(write(tmp_path / "my-colours", COLORPARSE)) as project:
        assert project.name == "colorparse"
        assert project.origin == {"kind": "directory", "path": str(tmp_path / "my-colours")}


def test_the_folder_name_less_its_version_when_nothing_names_it(tmp_path):
    assert project_name(tmp_path / "fancylib-2.0.1") == "fancylib"


def test_environments_and_ignored_files_are_no_part_of_the_project(tmp_path):
    root = write(tmp_path / "repo", COLORPARSE)
    write(root, {".venv/lib/site.py": "x = 1\n", "build/lib/colorparse/parse.py": "y = 2\n"})
    with opened(root) as project:
        assert not [f for f in project.files if f.startswith((".venv/", "build/"))]
    # In a git repository, what git ignores is left out too.
    write(root, {".gitignore": "scratch/\n", "scratch/notes.py": "z = 3\n"})
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    with opened(root) as project:
        assert "scratch/notes.py" not in project.files
        assert "colorparse/parse.py" in project.files  # untracked, not ignored: counts


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.tar.gz", "no such file"),
        (lambda d: write(d, {"notes.txt": "hi"}) / "notes.txt", "not a directory or an sdist"),
        (lambda d: write(d, {"broken.tar.gz": "not gzip"}) / "broken.tar.gz", "cannot unpack"),
        (lambda d: write(d / "lib", {"lib.py": "X = 1\n"}), "no test modules"),
    ],
)
def test_unusable_paths_say_why(tmp_path, make, message):
    with pytest.raises(SourceError, match=message), opened(make(tmp_path)):
        pass


def test_a_task_is_rebuilt_only_from_the_source_it_was_made_from(tmp_path):
    first = write(tmp_path / "a", COLORPARSE)
    with opened(first) as project:
        task = Task(
            id="colorparse.x", repo="colorparse", base_commit="0" * 40, instruction="",
            test_patch="", fail_to_pass=(), pass_to_pass=(),
            metadata={"project": "colorparse", "project_hash": project.hash,
                      "origin": project.origin},
        )  # fmt: skip
    textbits = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    with source_of(task, [textbits, first]) as found:  # another project is passed over
        assert found.name == "colorparse" and found.root == first
    edited = {**COLORPARSE, "colorparse/parse.py": COLORPARSE["colorparse/parse.py"] + "\n"}
    other = write(tmp_path / "b", edited)
    with pytest.raises(SourceError, match=f"differs from the one the task was made from.*{other}"):
        with source_of(task, [other]):
            pass
    with pytest.raises(SourceError, match="no project source of colorparse is given"):
        with source_of(task, [textbits]):
            pass
