"""At publish: a release's provenance and, with a key, its signature, kept beside its manifest.

Both are written after the manifest (a signature names the manifest's bytes, and an OCI referrer needs its
subject): a release is briefly visible unsigned, and a verifying consumer refuses it until the signature lands. A
publisher killed in between leaves it so; publishing again adds what is missing. The first signature and
provenance written stay (create-only, like the manifest).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from compiler.core.errors import Conflict, InvalidInput
from compiler.core.records import ReleaseContent, ReleaseManifest
from compiler.releases.manifest import damaged, holds, parse_manifest
from compiler.releases.provenance import BuildContext, provenance_statement, repository_of
from compiler.releases.signing import RELEASE_SIGNATURE, load_signer, sign, statement
from compiler.stores import Store

SIGN_KEY_ENV = "COMPILE_SIGN_KEY"


def signer_of(key: Path | str | None, reference: str | None = None, pipeline: Path | None = None):
    """The signer for a publish, None for an unsigned release: ``--sign-key`` (else ``$COMPILE_SIGN_KEY``), else
    the pipeline's ``signing.key`` reference, relative to the pipeline. Each may be ``env://VAR`` (the PEM a CI
    secret put in ``$VAR``), an HSM, KMS or ``sigstore:`` keyless URI (:mod:`compiler.releases.keyrefs`), or a
    file path. ``$COMPILE_SIGN_KEY`` set but empty is refused (a secret that did not arrive must not publish
    unsigned), and a key file inside the pipeline's repository is refused: committed with the pipeline, it is no
    secret. No error prints a key value that may be key material (keyrefs.shown_key)."""
    from compiler.releases.keyrefs import ENV_REFERENCE, NOT_SHOWN, is_reference, reference_signer, shown_key

    if not key and os.environ.get(SIGN_KEY_ENV) == "":
        raise InvalidInput(
            f"${SIGN_KEY_ENV} is set but empty; give the signing key there (a PEM file's path, env://VAR, an HSM "
            "or KMS key URI, or sigstore:), or unset it to publish unsigned"
        )
    role = "--sign-key" if key else f"${SIGN_KEY_ENV}"
    value = str(key or os.environ.get(SIGN_KEY_ENV) or "") or None
    base = None
    if value is None and reference is not None:
        value, role = reference, f"{pipeline}: signing.key"
        base = pipeline.parent if pipeline is not None else Path()
    if value is None:
        return None
    if is_reference(value):
        return reference_signer(value, role)
    shown = shown_key(value, base)
    if pipeline is not None and not value.startswith(ENV_REFERENCE) and shown != NOT_SHOWN:  # an existing file
        repository = repository_of(pipeline)
        if ((base / value) if base is not None else Path(value)).resolve().is_relative_to(repository):
            raise InvalidInput(
                f"{role} {shown}: inside the pipeline's repository {repository}, where a private "
                "key is no secret; keep it outside (a CI secret written to a temporary file, or "
                "signing.key: env://VAR)"
            )
    return load_signer(value, role, base)


def attest(
    store: Store, content: ReleaseContent, content_sha256: str, signer, context: BuildContext | None
) -> dict[str, Any]:
    """Keep the provenance (signed with ``signer`` when given) and the manifest's signature beside the published
    version; what was written and what was there already."""
    name, version = content.name, content.version
    manifest = store.read_manifest(name, version)
    if manifest is None:
        raise damaged(store, f"releases/{name}/{version}/manifest.json", "it vanished right after publishing")
    found = holds(manifest, store, name, version, content)
    if found is None:
        raise Conflict(
            f"{name}@{version} is already published in {store.uri} with other content (a racing "
            "publisher's, on a registry); releases are immutable: publish a new version"
        )
    if found == "same inputs":  # rebuilt from the same inputs: what is attested is the published plans
        content = parse_manifest(manifest, store, name, version).content
    image = store.artifact(name, version)  # on OCI also the image manifest, the subject cosign looks for
    extra = [{"name": image[0], "digest": {"sha256": image[1]}}] if image else []
    provenance = provenance_statement(content, context, extra)
    provenance_bytes = sign(provenance, signer) if signer else json.dumps(provenance, indent=2).encode()
    kept = store.attach(name, version, "provenance", provenance_bytes)
    provenance_bytes = provenance_bytes if kept is None else kept
    outcome = {"provenance": "written" if kept is None else "already there", "signature": "unsigned"}
    if signer is not None:
        subject = [{"name": f"{name}@{version}", "digest": {"sha256": hashlib.sha256(manifest).hexdigest()}}, *extra]
        signed = sign(
            statement(
                subject,
                RELEASE_SIGNATURE,
                {"contentSha256": content_sha256, "provenanceSha256": hashlib.sha256(provenance_bytes).hexdigest()},
            ),
            signer,
        )
        outcome["signature"] = (
            "written" if store.attach(name, version, "signature", signed) is None else "already there"
        )
        outcome["model_signature"] = _model_signature(store, content, manifest, signer)
        from compiler.releases.keyrefs import exported_public_key

        outcome["public_key"] = exported_public_key(signer)
        outcome["signed_by"] = getattr(signer, "identity", None)
    return outcome


def _model_signature(store: Store, content: ReleaseContent, manifest_bytes: bytes, signer) -> str:
    """The OpenSSF model_signing signature of the pulled release, beside the manifest: ``written``, ``already
    there``, or why there is none (model_signing signs with EC keys held here only)."""
    from compiler.releases.model_signature import KIND, layout, rtx_kind, sign_layout, signing_key

    key = signing_key(signer)
    if key is None:
        return "not written: model_signing needs an EC (P-256) key file or env:// key"
    name, version = content.name, content.version
    manifest = parse_manifest(manifest_bytes, store, name, version)
    try:
        bundle = sign_layout(layout(manifest), f"{name}-{version}", key)
        exports = {
            rtx_kind(p): sign_layout(files, f"{name}-{version}-rtx-{p}", key) for p, files in rtx_files(manifest)
        }
    except ImportError:
        return "not written: model-signing is not installed (pip install 'trt-compile[sigstore]')"
    for kind, signed in exports.items():
        store.attach(name, version, kind, signed)
    return "written" if store.attach(name, version, KIND, bundle) is None else "already there"


def rtx_files(manifest: ReleaseManifest) -> list[tuple[str, dict[str, str]]]:
    """Each precision ``compile export rtx --precision P`` can export, with the files of its folder."""
    from compiler.core.plugins import RTX_RUNTIME
    from compiler.releases.rtx_layout import export_engines, rtx_layout

    found = []
    for precision in sorted({e.precision.value for e in manifest.content.engines if e.runtime.family == RTX_RUNTIME}):
        try:
            engines = export_engines(manifest, precision, None)
            found.append((precision, rtx_layout(manifest, engines, manifest.content.name).files()))
        except InvalidInput:  # no folder of that precision (two plans for one compute capability...): none signed
            continue
    return found
