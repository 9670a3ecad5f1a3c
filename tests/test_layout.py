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


def _architecture_section(title: str) -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_architecture_doc_names_every_module_in_its_folder():
    import re

    tree = _architecture_section("The tree").split("```")[1]
    blocks = re.split(r"\n(?=\s{0,2}[a-z_]+/ )", tree)
    described = {
        block.split()[0].rstrip("/"): set(re.findall(r"[a-z_0-9]+", block)) for block in blocks if block.strip()
    }
    missing = []
    for path in tracked_files():
        parts = path.split("/")
        if not path.endswith(".py") or parts[0] not in ("compiler", "calibration") or parts[-1].startswith("__"):
            continue
        folder = parts[1] if parts[0] == "compiler" and len(parts) > 2 else parts[0]
        if parts[-1][:-3] not in described.get(folder, set()):
            missing.append(path)
    assert not missing


def test_the_allowed_crossings_the_doc_lists_are_the_contracts_ignored_imports():
    import re
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    ignored = {line for contract in contracts for line in contract.get("ignore_imports", [])}
    listed = set(re.findall(r"^(\S+ -> \S+)$", _architecture_section("The layers"), re.MULTILINE))
    assert listed == ignored


def test_the_consumer_api_loads_no_onnx_onnxruntime_or_polygraphy():
    """What the fourth import contract says, seen at run time: a serving host that pulls imports none of them."""
    import sys

    script = (
        "import sys\n"
        "from compiler.releases import list_store, pull, resolve, select_engine, verify_release\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'onnx', 'onnxruntime', 'polygraphy'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"
