"""Keys, and in-toto statements signed into Sigstore bundles: the one place a release is signed or a signature
checked.

The envelope is DSSE (securesystemslib's :class:`~securesystemslib.dsse.Envelope`, its signer and keys over
``cryptography``), wrapped as a Sigstore bundle v0.3 whose verification material is a public-key hint: the form
cosign writes for a key pair, so ``cosign verify --key`` reads it. No cryptography is written here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.files import NotRegularFile, read_regular
from compiler.core.jsonio import parse_json
from compiler.releases.keyrefs import ENV_REFERENCE, env_key, shown_key
from compiler.stores.base import MAX_ATTACHMENT_BYTES

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MAX_KEY_BYTES = 64 << 10
"""A PEM key of the accepted kinds is a few hundred bytes; a bigger file is not one."""
MAKE_KEY = (
    "make one with `openssl genpkey -algorithm ed25519 -out release.pem` (or `openssl ecparam -name "
    "prime256v1 -genkey -noout -out release.pem`), its public half with `openssl pkey -in release.pem "
    "-pubout -out release.pub`"
)

RELEASE_SIGNATURE = "https://trt-compile.github.io/release-signature/v1"
"""The predicate of a release's signature statement: its subject is the manifest's bytes by sha256 (a URI under the
project's own domain, as its OCI names are: compiler.stores.oci_names)."""
READABLE_SIGNATURES = (RELEASE_SIGNATURE, "https://trt-compile.dev/release-signature/v1")
"""The predicate types a verifier accepts: releases signed before issue 42 name a domain that is not the project's."""


def _read_key_file(path: Path, label: str) -> bytes:
    """At most MAX_KEY_BYTES + 1 bytes of a regular file (a FIFO or device is refused without blocking on it)."""
    try:
        data = read_regular(path, MAX_KEY_BYTES)
    except FileNotFoundError:
        raise InvalidInput(f"{label}: no such file (nor env://VAR); {MAKE_KEY}") from None
    except NotRegularFile:
        raise InvalidInput(f"{label}: not a regular file; give a PEM key file") from None
    except OSError as exc:
        raise InvalidInput(f"{label}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(data) > MAX_KEY_BYTES:
        raise InvalidInput(f"{label}: over {MAX_KEY_BYTES // 1024} KiB, not a PEM key; {MAKE_KEY}")
    return data


def key_bytes(value: str | Path, role: str, base: Path | None = None) -> tuple[bytes, str]:
    """The PEM bytes a key option or field names (``env://VAR``, else a file, relative to ``base`` when given)
    and the label its errors name it by, which never holds key material (keyrefs.shown_key)."""
    label = f"{role} {shown_key(value, base)}"
    if str(value).startswith(ENV_REFERENCE):
        return env_key(str(value), label), label
    return _read_key_file((base / value) if base is not None else Path(value), label), label


def _accepted(key: Any, label: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if key.curve.name == "secp256r1":
            return key
        raise InvalidInput(
            f"{label}: an EC key on {key.curve.name}; only P-256 (prime256v1) or Ed25519 keys are accepted; {MAKE_KEY}"
        )
    kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "") or "unknown"
    raise InvalidInput(f"{label}: a {kind} key; only EC P-256 or Ed25519 keys are accepted; {MAKE_KEY}")


def load_signer(value: str | Path, role: str = "--sign-key", base: Path | None = None):
    """The signer of a private key file or ``env://VAR`` (EC P-256 or Ed25519, unencrypted PEM as openssl writes
    it)."""
    return signer_from_pem(*key_bytes(value, role, base))


def signer_from_pem(data: bytes, label: str):
    """The signer of PEM bytes (a key file's, or a CI secret's from an environment variable); ``label`` names
    where they came from in an error, never the bytes."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    if len(data) > MAX_KEY_BYTES:
        raise InvalidInput(f"{label}: over {MAX_KEY_BYTES // 1024} KiB, not a PEM key; {MAKE_KEY}")
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise InvalidInput(
            f"{label}: the key is encrypted with a passphrase; give it unencrypted, kept in a CI "
            "secret (`openssl pkey -in KEY -out plain.pem`)"
        ) from None
    except Exception as exc:  # cryptography raises ValueError or UnsupportedAlgorithm
        if b"PUBLIC KEY" in data:
            raise InvalidInput(f"{label}: a public key; signing needs the private key ({MAKE_KEY})") from None
        raise InvalidInput(f"{label}: not a PEM private key ({type(exc).__name__}); {MAKE_KEY}") from None
    return CryptoSigner(_accepted(key, label))


MAX_TRUSTED_KEYS = 16
"""Public keys one trust file may hold (a rotation needs two or three)."""
PUBLIC_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.DOTALL)


class TrustedKeys(tuple):
    """Several public keys trusted at once (a key rotation: the old and the new): a release signed by any one of
    them verifies. One file of concatenated PEM public keys, as a CA bundle holds certificates."""


def load_public_key(value: str | Path, role: str = "--key"):
    """The public key of a PEM file or ``env://VAR`` (EC P-256 or Ed25519), as securesystemslib verifies with
    it; :class:`TrustedKeys` when the file holds several."""
    data, label = key_bytes(value, role)
    if data.count(b"-----BEGIN ") <= 1:
        return _public_key(data, label)
    blocks = PUBLIC_PEM.findall(data)
    rest = PUBLIC_PEM.sub(b"", data).strip()
    if rest:
        what = "a private key" if b"PRIVATE KEY" in rest else "something else"
        raise InvalidInput(
            f"{label}: holds {what} besides PEM public keys; a file of several trusted keys holds their public "
            "halves only, one after another (`cat old.pub new.pub > trusted.pub`)"
        )
    if len(blocks) > MAX_TRUSTED_KEYS:
        raise InvalidInput(f"{label}: {len(blocks)} public keys; trust at most {MAX_TRUSTED_KEYS} at once")
    return TrustedKeys(_public_key(block, f"{label} (key {i + 1} of {len(blocks)})") for i, block in enumerate(blocks))


def _public_key(data: bytes, label: str):
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    try:
        key = load_pem_public_key(data)
    except Exception as exc:  # cryptography raises ValueError or UnsupportedAlgorithm
        if b"PRIVATE KEY" in data:
            raise InvalidInput(
                f"{label}: a private key; give its public half (`openssl pkey -in KEY -pubout "
                "-out release.pub`): verifying hosts never hold the private key"
            ) from None
        raise InvalidInput(f"{label}: not a PEM public key ({type(exc).__name__}); {MAKE_KEY}") from None
    return SSlibKey.from_crypto(_accepted(key, label))


def statement(subjects: list[dict[str, Any]], predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1, validated with in-toto-attestation (its JSON is written from the dicts: the
    protobuf Struct would turn every integer into a float)."""
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import STATEMENT_TYPE_URI, Statement

    descriptors = [ResourceDescriptor(name=s["name"], digest=s["digest"]).pb for s in subjects]
    Statement(descriptors, predicate_type, predicate).validate()
    return {"_type": STATEMENT_TYPE_URI, "subject": subjects, "predicateType": predicate_type, "predicate": predicate}


def sign(statement_: dict[str, Any], signer) -> bytes:
    """A Sigstore bundle of ``statement_`` in a DSSE envelope signed by ``signer``: a key's (file, HSM or KMS), or
    keyless (compiler.releases.keyless)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    from compiler.releases.keyless import KeylessSigner

    payload = json.dumps(statement_, sort_keys=True, separators=(",", ":")).encode()
    if isinstance(signer, KeylessSigner):
        return signer.sign_statement(payload)
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    try:
        envelope.sign(signer)
    except Exception as exc:
        if isinstance(signer, CryptoSigner):
            raise
        from compiler.core.text import redacted_reason

        raise EnvironmentProblem(
            f"signing with the HSM or KMS key failed ({redacted_reason(exc)}); publishing again adds the signature"
        ) from None
    bundle = {
        "mediaType": BUNDLE,
        "verificationMaterial": {"publicKey": {"hint": signer.public_key.keyid}, "tlogEntries": []},
        "dsseEnvelope": envelope.to_dict(),
    }
    return json.dumps(bundle, indent=2).encode()


def open_bundle(data: bytes, what: str) -> tuple[Any, dict[str, Any]]:
    """A stored bundle's DSSE envelope and the statement it carries, unchecked; CheckFailed when it is not a
    bundle of an in-toto statement."""
    from securesystemslib.dsse import Envelope

    try:
        bundle = parse_json(data, MAX_ATTACHMENT_BYTES)
        if not isinstance(bundle, dict):
            raise ValueError(f"a JSON {type(bundle).__name__}, not an object")
        if bundle.get("mediaType") != BUNDLE:
            raise ValueError(f"mediaType {str(bundle.get('mediaType'))[:80]!r}")
        envelope = Envelope.from_dict(bundle["dsseEnvelope"])
        if envelope.payload_type != PAYLOAD_TYPE:
            raise ValueError(f"payloadType {str(envelope.payload_type)[:80]!r}")
        carried = parse_json(envelope.payload, MAX_ATTACHMENT_BYTES)
        if not isinstance(carried, dict) or carried.get("_type") != STATEMENT_TYPE:
            raise ValueError("no in-toto Statement v1 inside")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckFailed(f"{what} is not a Sigstore bundle of an in-toto statement ({_short(exc)})") from None
    except Exception as exc:  # securesystemslib's FormatError for a malformed signature entry
        raise CheckFailed(f"{what} is not a Sigstore bundle of an in-toto statement ({_short(exc)})") from None
    return envelope, carried


def verify(data: bytes, key, what: str) -> dict[str, Any]:
    """The statement of a bundle, once a signature in it verifies with ``key``; CheckFailed otherwise. The DSSE
    ``keyid`` is a hint (cosign leaves it empty), so every signature is tried against the key."""
    from securesystemslib.exceptions import UnverifiedSignatureError
    from securesystemslib.signer import Signature

    from compiler.releases.keyless import KeylessIdentity

    if isinstance(key, KeylessIdentity):
        carried = key.verify(data, what, PAYLOAD_TYPE)
        if not isinstance(carried, dict) or carried.get("_type") != STATEMENT_TYPE:
            raise CheckFailed(f"{what}: its envelope carries no in-toto Statement v1")
        return carried
    if keyless_bundle(data):
        raise CheckFailed(
            f"{what} is signed keyless (a Sigstore certificate, no key); verify it with --identity and --issuer"
        )
    envelope, carried = open_bundle(data, what)
    pae = envelope.pae()
    for trusted in key if isinstance(key, TrustedKeys) else (key,):
        for signature in envelope.signatures.values():
            try:
                trusted.verify_signature(Signature(trusted.keyid, signature.signature), pae)
                return carried
            except UnverifiedSignatureError:
                continue
            except Exception:  # a signature of another key type, or not a signature at all
                continue
    given = "any of the keys given" if isinstance(key, TrustedKeys) else "the key given"
    raise CheckFailed(f"{what}: bad signature: no signature in it verifies with {given}")


def keyless_bundle(data: bytes) -> bool:
    """Whether a bundle carries a Sigstore certificate (a keyless signature) rather than a key's."""
    try:
        bundle = parse_json(data, MAX_ATTACHMENT_BYTES)
    except ValueError:
        return False
    material = bundle.get("verificationMaterial") if isinstance(bundle, dict) else None
    return isinstance(material, dict) and ("certificate" in material or "x509CertificateChain" in material)


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:160]
