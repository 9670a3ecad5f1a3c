"""The tree as docs/architecture.md draws it: no source folder a tool would take for build output, no file too long
to hold in one's head, and the import layers kept (the same contract `lint-imports` checks in .ci/run)."""

from __future__ import annotations

import subprocess

from tests.support.cli import REPO

OUTPUT_NAMES = {"build", "dist", "out"}
MAX_LINES = 700


def tracked_files() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def test_no_source_folder_is_named_like_build_output():
    folders = {part for path in tracked_files() for part in path.split("/")[:-1]}
    assert not folders & OUTPUT_NAMES


def test_no_python_file_is_over_700_lines():
    long = {
        path: n
        for path in tracked_files()
        if path.endswith(".py") and (n := len((REPO / path).read_text().splitlines())) > MAX_LINES
    }
    assert not long


def test_the_import_layers_hold_and_nothing_imports_in_a_cycle(monkeypatch):
    import grimp
    from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

    monkeypatch.chdir(REPO)  # lint-imports reads pyproject.toml from the working directory
    assert lint_imports(no_cache=True, no_logo=True) == EXIT_STATUS_SUCCESS
    graph = grimp.build_graph("compiler", "calibration", cache_dir=None)
    in_cycles = [
        module
        for module in graph.modules
        if any(
            graph.chain_exists(importer=imported, imported=module)
            for imported in graph.find_modules_directly_imported_by(module)
        )
    ]
    assert not in_cycles
