"""The views of releases for people: what publish, pull, ls, verify, provenance, promote, yank and export did
(the stages' views are in :mod:`compiler.cli.render`, with the helpers both share)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.cli.render import console, table
from compiler.core.text import human_size, printable

if TYPE_CHECKING:
    from compiler.export.rtx import RtxExport
    from compiler.export.triton import TritonExport
    from compiler.releases.channels import PromoteResult
    from compiler.releases.fsck import StoreCheck
    from compiler.releases.listing import Listing
    from compiler.releases.publish import PublishResult
    from compiler.releases.pull import PullResult
    from compiler.releases.pull_all import PullAllResult
    from compiler.releases.verify import VerifyResult
    from compiler.report.diff import ReleaseDiff


def published(result: PublishResult) -> None:
    what = {
        "published": "published",
        "repaired": "already published with this content; damaged blobs replaced",
        "rebuilt": "already published from these inputs; its plans are kept (this build's differ only in bytes)",
    }.get(result.status, "already published with this content; nothing sent")
    console.print(
        f"{result.name}@{result.version} {what}: {result.engines} engines in {printable(result.store)}; "
        f"{result.uploaded_blobs} blobs sent ({human_size(result.uploaded_bytes)}), "
        f"{result.present_blobs} already there, {result.seconds:.2f} s"
    )
    if result.provenance:
        signed = {"written": "signed", "already there": "signature already there"}.get(result.signature, "unsigned")
        console.print(
            f"provenance {result.provenance}; {signed}"
            + (f" keyless as {printable(result.signed_by)}" if result.signed_by else "")
        )
    if result.model_signature:
        console.print(f"model_signing signature (for `compile pull --all`): {result.model_signature}")
    if result.public_key:
        console.print("the signing key's public half, for `compile verify --key` (save it as release.pub):")
        for line in result.public_key.strip().splitlines():
            console.print(line, markup=False, highlight=False)


def pulled(result: PullResult) -> None:
    console.print(
        f"{printable(result.out)}: {result.sku} {result.precision} "
        f"({', '.join(result.compute_capabilities)}) of {result.release} (version {result.version}), "
        f"{human_size(result.size_bytes)}, sha256 {result.sha256[:12]} verified"
        + (", from the pull cache" if result.from_cache else "")
        + f"; loads with {result.runtime.family_name} {result.runtime.loads_with}"
    )
    if result.golden is not None:
        golden = result.golden
        console.print(
            f"{printable(golden.out)}: {golden.samples} golden sample(s) of "
            f"{', '.join(t.name for t in golden.inputs)} with FP32 reference outputs, sha256 "
            f"{golden.sha256[:12]} verified"
        )


def listing(listing: Listing) -> None:
    """One version's engines, one release's versions, or every release of the store."""
    if listing.manifest is not None:
        content = listing.manifest.content
        console.print(
            f"{content.name}@{content.version} of {content.model_name} (sha256 "
            f"{content.model_sha256[:12]}), published {listing.manifest.published.at} by "
            f"{printable(listing.manifest.published.by)}"
        )
        console.print(
            table(
                "Engines",
                ["sku", "compute capability", "precision", "in precision", "runtime", "loads with", "size", "sha256"],
                [
                    [
                        e.sku,
                        ", ".join(e.compute_capabilities),
                        e.precision,
                        "" if e.low_precision_share is None else f"{e.low_precision_share:.0%}",
                        e.runtime.name,
                        e.runtime.loads_with,
                        human_size(e.plan.size_bytes),
                        e.plan.sha256[:12],
                    ]
                    for e in content.engines
                ],
            )
        )
        golden = content.golden
        names = printable(", ".join(t.name for t in golden.inputs)) if golden else ""
        console.print(
            f"golden inputs: {golden.samples} sample(s) of {names} with FP32 reference outputs, "
            f"{human_size(golden.blob.size_bytes)}, sha256 {golden.blob.sha256[:12]}"
            if golden
            else "golden inputs: none (checked without --data)"
        )
        if listing.yanked is not None:
            console.print(
                f"YANKED by {printable(listing.yanked.by)} at {listing.yanked.at}: {printable(listing.yanked.reason)}"
            )
    elif listing.name is not None:
        console.print(
            table(
                f"{listing.name} in {printable(listing.store)}",
                ["version", "engines", "size", "check", "published", "channels"],
                [
                    [
                        v.version + (" (yanked)" if v.yanked else ""),
                        v.engines,
                        human_size(v.size_bytes),
                        v.check,
                        v.published_at,
                        ", ".join(c for c, at in listing.channels.items() if at == v.version),
                    ]
                    for v in listing.versions
                ],
            )
        )
    else:
        console.print(
            table(
                f"Releases in {printable(listing.store)}",
                ["name", "versions", "latest", "channels"],
                [
                    [
                        r.name,
                        len(r.versions),
                        r.latest or ("-" if not r.versions else "all yanked"),
                        ", ".join(f"{c}={v}" for c, v in r.channels.items()),
                    ]
                    for r in listing.releases
                ]
                or [["-", 0, "-", "none published"]],
            )
        )


def yanked(result) -> None:
    what = "yanked" if result.status == "yanked" else f"was already yanked (by {printable(result.by)} at {result.at})"
    console.print(f"{result.name}@{result.version} {what}: {printable(result.reason)}")


def store_check(report: StoreCheck) -> None:
    scope = f"{report.name} in " if report.name else ""
    console.print(
        f"{scope}{printable(report.store)}: {report.versions} versions, {report.channels} channels, "
        f"{report.blobs} blobs ({human_size(report.bytes_read)}) read"
        + (
            ""
            if report.unreferenced_listed
            else "; unreferenced blobs not listed (the registry lists none, or one release of a shared pool)"
        )
    )
    if report.findings:
        console.print(
            table(
                "Findings",
                ["kind", "where", "why"],
                [[f.kind, printable(f.key), printable(f.why)] for f in report.findings],
            )
        )
    else:
        console.print("nothing damaged, dangling or unreferenced")


def pulled_all(result: PullAllResult) -> None:
    signature = "model.sig (model_signing verify key --signature DIR/model.sig ...)" if result.model_signature else ""
    console.print(
        f"{printable(result.out)}: {len(result.files)} files of {result.release} (version {result.version}), each "
        f"verified" + (f"; {signature}" if signature else "; no model_signing signature (published without an EC key)"),
        markup=False,
        highlight=False,
    )


def promoted(result: PromoteResult) -> None:
    moved = f"{result.previous} -> {result.version}" if result.previous else f"new, at {result.version}"
    said = {"moved": moved, "repaired": f"damaged record replaced, at {result.version}"}
    said["signed"] = f"at {result.version}, its move now signed"
    console.print(
        f"{result.name}@{result.channel}: "
        + said.get(result.status, f"already at {result.version}")
        + (" (signed)" if result.signed and result.status != "signed" else "")
    )


def exported(result: TritonExport) -> None:
    what = "written" if result.status == "written" else "already there with these plans"
    console.print(
        f"{printable(result.model_dir)}/{result.model_version}: {result.release} (version "
        f"{result.version}) {what} for {result.triton}; "
        + ", ".join(f"{cc} -> {file}" for cc, file in result.plans.items())
    )
    console.print(
        f"batching: {printable(result.batching)}"
        + (
            f"; preferred batch sizes {', '.join(map(str, result.preferred_batch_sizes))}"
            if result.preferred_batch_sizes
            else ""
        )
        + (f"; warmup from {len(result.warmup)} golden sample file(s)" if result.warmup else "")
    )
    for note in result.notes:
        console.print(f"note: {printable(note)}")


def exported_rtx(result: RtxExport) -> None:
    what = "written" if result.status == "written" else "already there"
    console.print(
        f"{printable(result.model_dir)}: {result.release} (version {result.version}) {what}; loads with "
        f"TensorRT-RTX {result.runtime.loads_with}"
    )
    console.print(
        table(
            "Engines",
            ["compute capability", "sku", "precision", "engine", "EP-context model", "validity"],
            [[t.compute_capability, t.sku, t.precision, t.engine, t.context_model, t.validity] for t in result.targets],
        )
    )


def verified(result: VerifyResult) -> None:
    console.print(
        f"{result.release} (version {result.version}) verified with {printable(result.key)}: signature "
        f"over manifest sha256 {result.manifest_sha256[:12]}, provenance "
        f"{'signed' if result.provenance_signed else 'named by the signature'} with {result.subjects} "
        f"subjects = the manifest's plans, {result.blobs} blobs ({human_size(result.bytes)}) hash to their "
        f"digests; {result.seconds:.2f} s"
    )


def provenance(statement: dict[str, Any]) -> None:
    """A provenance statement: its subjects and what made them."""
    predicate = statement.get("predicate") or {}
    definition, run = predicate.get("buildDefinition") or {}, predicate.get("runDetails") or {}
    console.print(
        f"built by {printable(str((run.get('builder') or {}).get('id')))}, "
        f"{(run.get('metadata') or {}).get('startedOn')} to {(run.get('metadata') or {}).get('finishedOn')}"
    )
    console.print(
        table(
            "Subjects",
            ["plan", "sha256"],
            [[s.get("name"), (s.get("digest") or {}).get("sha256")] for s in statement.get("subject") or []],
        )
    )
    console.print(
        table(
            "Resolved dependencies",
            ["name", "role", "sha256 or version"],
            [
                [
                    d.get("name"),
                    (d.get("annotations") or {}).get("role", "tool"),
                    (d.get("digest") or {}).get("sha256") or d.get("uri", ""),
                ]
                for d in definition.get("resolvedDependencies") or []
            ],
        )
    )


def release_diff(result: ReleaseDiff) -> None:
    """compile diff: the changes, regressions first and in red."""
    if not result.changes:
        console.print(f"{result.before} -> {result.after}: no change")
        return
    rows = [
        [c.where, c.what, str(c.before), str(c.after), "REGRESSION" if c.regression else (c.note or "")]
        for c in result.changes
    ]
    title = f"{result.before} -> {result.after}: {len(result.regressions)} regression(s)"
    console.print(table(title, ["where", "what", "before", "after", ""], rows))
