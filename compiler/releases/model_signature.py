"""OpenSSF model signing (the ``model-signing`` package, the format NVIDIA's NGC signs models with) for a pulled
release: what ``model_signing verify key --signature DIR/model.sig --public_key KEY.pub DIR`` accepts.

The signed layout is the folder ``compile pull --all NAME@VERSION --out DIR`` writes: every blob of the release under
its release file name (:func:`compiler.core.release_files.release_blobs`: ``rtx-4090-fp16.plan``,
``rtx-4090-fp16.layers.json``, ``check.json``, ``golden.npz``), flat, beside :data:`SIGNATURE_FILE`. The same
files an ``oras pull`` of an OCI release writes, by their titles. model_signing verifies every file of a folder, so
a folder of other files (one SKU's plan alone) needs a signature of its own and does not verify against this one.

The statement is model_signing's own (``https://model_signing/signature/v1.0``, serialization ``files`` with
sha256): its manifest is made from the digests the release manifest already holds (model_signing hashes a whole
file with sha256, the digest the release records), and it is signed by the library's EC signer. Only an EC key
held in this process (a key file or ``env://``) can sign it: model_signing takes no Ed25519 key, and an HSM or KMS
key never leaves its device.
"""

from __future__ import annotations

from typing import Any

from compiler.core.records import ReleaseManifest
from compiler.core.release_files import release_blobs

SIGNATURE_FILE = "model.sig"
"""Where the signature lies in a pulled release (model_signing's default name, which its verify ignores)."""
KIND = "model-signature"
"""The attachment that holds it beside the manifest."""
RTX_PRECISIONS = ("fp32", "fp16", "int8", "fp8")
MAX_SIGNED_FILES = 4096
"""Files one signature may name: a release of every SKU and precision has a few hundred."""


def rtx_kind(precision: str) -> str:
    """The attachment holding the signature of ``compile export rtx --precision PRECISION``'s folder."""
    return f"{KIND}-rtx-{precision}"


def signed_files(bundle: bytes) -> dict[str, str] | None:
    """The files (name -> sha256) a model_signing bundle names, read from its statement without checking the
    signature (``model_signing verify`` does that); None when it is not such a bundle."""
    import base64
    import binascii
    import json

    try:
        envelope = json.loads(bundle)["dsseEnvelope"]
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        resources = statement["predicate"]["resources"]
        if not isinstance(resources, list) or len(resources) > MAX_SIGNED_FILES:
            return None
        return {str(r["name"]): str(r["digest"]) for r in resources if r.get("algorithm") == "sha256"}
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError):
        return None


SERIALIZATION = {"method": "files", "hash_type": "sha256", "allow_symlinks": False, "ignore_paths": [SIGNATURE_FILE]}


def layout(manifest: ReleaseManifest) -> dict[str, str]:
    """The pulled release's files: name -> sha256."""
    return {blob.title: blob.ref.sha256 for blob in release_blobs(manifest)}


def signing_key(signer: Any) -> Any | None:
    """The EC private key behind ``signer`` when model_signing can sign with it, else None (Ed25519, an HSM, a KMS,
    keyless)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    if not isinstance(signer, CryptoSigner):
        return None
    key = load_pem_private_key(signer.private_bytes, password=None)
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def sign_layout(files: dict[str, str], model_name: str, private_key: Any) -> bytes:
    """model_signing's Sigstore bundle over ``files`` (name -> sha256), signed with the EC ``private_key``."""
    from model_signing import manifest as signed_manifest
    from model_signing._hashing.hashing import Digest
    from model_signing._signing import sign_ec_key
    from model_signing._signing.signing import Payload

    class _HeldKeySigner(sign_ec_key.Signer):
        """The library's EC signer, given the key this process holds: it would read it from a file again."""

        def __init__(self, key: Any) -> None:
            sign_ec_key._check_supported_ec_key(key.public_key())
            self._private_key = key

    serialization = signed_manifest.SerializationType.from_args(SERIALIZATION)
    items = [serialization.new_item(name, Digest("sha256", bytes.fromhex(sha))) for name, sha in files.items()]
    payload = Payload(signed_manifest.Manifest(model_name, items, serialization))
    return _HeldKeySigner(private_key).sign(payload).bundle.to_json().encode()  # as Signature.write writes it
