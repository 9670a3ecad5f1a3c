"""`compile report` (release-report.html of a release run, a build folder or a published release) and `compile diff`
(what changed between two of them, regressions first)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, StoreOption, examples, option, switch
from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.flags import GATES, INPUTS, OUTPUT
from compiler.stores import DEFAULT_STORE

Target = Annotated[
    str,
    typer.Argument(
        metavar="WORK_DIR|BUILD_DIR|NAME@VERSION",
        show_default=False,
        help="A release run's work folder (--work), a build folder, or a published release in --store.",
    ),
]


def load_view(target: str, store: str):
    """The report view of ``target``: a release work folder (its builds, calibrations and stage timeline), a build
    folder, or NAME@VERSION in ``store``."""
    from compiler.pipeline.report import read_report, stage_rows
    from compiler.report.view import from_build_folders, from_release, from_work_folder

    folder = Path(target)
    if not folder.is_dir():
        if "@" not in target:
            raise InvalidInput(
                f"{target}: neither a folder nor NAME@VERSION; give a work or build folder, or a release"
            )
        return from_release(store, target)
    if (folder / "build.json").is_file():
        return from_build_folders(folder.name, [folder], [], [], folder)
    run = read_report(folder)
    title = f"{run.name}@{run.version}" if run else folder.name
    view = from_work_folder(folder, title, stage_rows(run) if run else [])
    if view is None:
        raise InvalidInput(
            f"{folder}: no build.json in it or in its builds/; give a release's --work or a build folder"
        )
    return view


@examples(
    "compile report release/digits-1.0.0",
    "compile report digits@1.0.1 --store s3://models/team --previous digits@1.0.0 --out report.html",
    "compile report engines --json",
    "compile report release/digits-1.0.0 --explorer overlays",
)
def report(
    target: Target,
    previous: Annotated[
        str | None,
        option(
            "REF",
            INPUTS,
            "A release (NAME@VERSION in --store) or folder to compare with, shown on the page.",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = DEFAULT_STORE,
    out: Annotated[
        Path | None,
        option(
            "FILE",
            OUTPUT,
            "Where to write the page (default: release-report.html in the folder, or here).",
            show_default=False,
        ),
    ] = None,
    explorer: Annotated[
        Path | None,
        option(
            "DIR",
            OUTPUT,
            "Also write Model Explorer node data (each node's precision, kernel and sensitivity) into DIR and print "
            "the model-explorer command that shows them.",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Write release-report.html: engines, accuracy against each gate, calibration, checks and the timeline."""
    from compiler.core.files import check_writable_folder
    from compiler.report import PAGE, write_page

    for role, folder in (("--out", out.parent if out else None), ("--explorer", explorer)):
        if folder is not None:
            check_writable_folder(folder, role)  # before anything is read
    view = load_view(target, store)
    page = out or (Path(target) / PAGE if Path(target).is_dir() else Path(f"{view.name}-{view.version}-report.html"))
    before = load_view(previous, store) if previous else None
    write_page(view, page, before)
    overlays = []
    if explorer is not None:
        from compiler.report.explorer import command, write_node_data

        overlays = write_node_data(view, explorer)
    if json:
        render.emit_json(view, versioned=False)
        return
    render.console.print(f"report: {page}")
    if overlays:
        render.console.print(f"Model Explorer node data: {len(overlays)} file(s) in {explorer}; open them with:")
        render.console.print(command(view.model, overlays), markup=False, soft_wrap=True)


@examples(
    "compile diff digits@1.0.0 digits@1.0.1 --store s3://models/team",
    "compile diff digits@1.0.0 release/digits-1.0.1 --fail-on-regression --json",
)
def diff(
    before: Annotated[str, typer.Argument(metavar="A", show_default=False, help="The earlier release or folder.")],
    after: Annotated[str, typer.Argument(metavar="B", show_default=False, help="The later release or folder.")],
    store: StoreOption = DEFAULT_STORE,
    fail_on_regression: Annotated[
        bool, switch("--fail-on-regression", GATES, "Exit 1 when any figure regressed beyond its tolerance.")
    ] = False,
    json: JsonOption = False,
) -> None:
    """What changed from A to B: engines, plan sizes, precision mix and every accuracy figure, regressions first."""
    from compiler.report.diff import diff as compare

    result = compare(load_view(before, store), load_view(after, store))
    if json:
        render.emit_json(result, versioned=False)
    else:
        render_releases.release_diff(result)
    if fail_on_regression and result.regressions:
        first = result.regressions[0]
        raise CheckFailed(
            f"{len(result.regressions)} regression(s) from {result.before} to {result.after}, first: {first.where} "
            f"{first.what} {first.before} -> {first.after}"
        )
