"""Signing keys named by reference instead of held in a file: an HSM through PKCS#11, a cloud KMS, or Sigstore's
keyless mode. The HSM and KMS signers are securesystemslib's (its private-key URIs, ``Signer.from_priv_key_uri``);
the key never leaves the device, and its public half is read from it so the publisher can hand it to verifiers.

A reference is checked for shape before anything else (exit 2), then the device or service is asked for the public
key before any build or upload (exit 3 when it cannot be reached). Errors name the reference, never a PIN or a
credential.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.text import redacted_reason

PIN_ENV = "COMPILE_HSM_PIN"
"""The HSM user PIN (a CI secret): never in the reference, which a pipeline file holds."""
PKCS11_ENV = "PYKCS11LIB"
"""The PKCS#11 module securesystemslib's HSM signer loads (e.g. SoftHSM2's /usr/lib/softhsm/libsofthsm2.so)."""
KEYLESS = "sigstore:"
"""Sigstore keyless signing with the CI's ambient OIDC identity (compiler.releases.keyless)."""
SCHEMES = ("hsm:", "awskms:", "gcpkms:", "azurekms:", KEYLESS)
ENV_REFERENCE = "env://"
"""``env://VAR``: the key's PEM is in ``$VAR`` (cosign's spelling), for a key option or a pipeline's signing.key."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
NOT_SHOWN = "(a key value, not shown)"
"""How an error names a key value that is neither an existing file nor a key reference: it may be the key itself
(a PEM, its base64 body, hex, a file's contents pasted), which is never printed."""
SHAPES = {
    "hsm": (
        re.compile(r"hsm:(?P<keyid>\d{1,9})?(\?label=(?P<label>[A-Za-z0-9%+._-]{1,128}))?"),
        "hsm:2?label=release (PKCS#11 key id and token label)",
    ),
    "awskms": (
        re.compile(
            r"awskms:(arn:aws[a-z-]{0,16}:kms:[a-z0-9-]{1,32}:\d{12}:(key|alias)/[A-Za-z0-9/_+=.@-]"
            r"{1,256}|alias/[A-Za-z0-9/_-]{1,256}|mrk-[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-"
            r"[0-9a-f]{12})"
        ),
        "awskms:arn:aws:kms:eu-west-1:111122223333:key/<key id>, awskms:alias/release or awskms:<key id>",
    ),
    "gcpkms": (
        re.compile(
            r"gcpkms:projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/locations/[a-z0-9-]{1,64}/keyRings/"
            r"[A-Za-z0-9_-]{1,63}/cryptoKeys/[A-Za-z0-9_-]{1,63}/cryptoKeyVersions/\d{1,9}"
        ),
        "gcpkms:projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/1",
    ),
    "azurekms": (
        re.compile(
            r"azurekms://(?P<vault>[A-Za-z][A-Za-z0-9-]{2,23})\.vault\.azure\.net/keys/"
            r"(?P<key>[A-Za-z0-9-]{1,127})(/[0-9a-f]{32})?"
        ),
        "azurekms://VAULT.vault.azure.net/keys/NAME[/VERSION]",
    ),
}
SCHEME_P256 = "ecdsa-sha2-nistp256"
PROBE = b"compile: may this key sign?"
EXTRAS = {
    "hsm": "securesystemslib[hsm] (python-pkcs11), or compile's [hsm] extra",
    "awskms": "securesystemslib[awskms]",
    "gcpkms": "securesystemslib[gcpkms]",
    "azurekms": "securesystemslib[azurekms]",
}


def is_reference(value: str | Path | None) -> bool:
    """Whether a ``--sign-key`` value names a key by URI rather than a PEM file."""
    return isinstance(value, str) and value.startswith(SCHEMES)


def shown_key(value: str | Path, base: Path | None = None) -> str:
    """How an error names a key given as ``value`` (a path relative to ``base`` when given): a key reference
    (a known scheme, ``env://`` included) or an existing file as written; anything else as :data:`NOT_SHOWN`,
    since it may be the key itself."""
    from compiler.core.text import printable

    text = str(value)
    if is_reference(text) or text.startswith(ENV_REFERENCE):
        return _shown(text)
    try:
        exists = os.path.lexists((base / value) if base is not None else value)
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no file
        exists = False
    return printable(text) if exists else NOT_SHOWN


def env_key(value: str, label: str) -> bytes:
    """The PEM an ``env://VAR`` key value names, from ``$VAR`` (exit 2 when the name is no variable's or the
    variable is unset or empty: a CI secret that did not arrive)."""
    variable = value[len(ENV_REFERENCE) :]
    if not ENV_NAME.fullmatch(variable):
        raise InvalidInput(f"{label}: after env:// give an environment variable's name (env://RELEASE_KEY)")
    material = os.environ.get(variable)
    if not material:
        raise InvalidInput(
            f"{label}: ${variable} is {'empty' if material == '' else 'not set'}; put the PEM key there from a "
            "CI secret"
        )
    return material.encode()


def shape_problem(value: str) -> str | None:
    """What is wrong with a key URI's form (None: well formed); no request is made."""
    if value == KEYLESS:
        return None
    scheme = value.split(":", 1)[0]
    if scheme == "sigstore":
        return f"keyless signing is just {KEYLESS!r} (the CI's OIDC identity); nothing follows it"
    pattern, example = SHAPES[scheme]
    if len(value) > 2048 or not pattern.fullmatch(value):
        return f"not a {scheme} key reference; write it as {example}"
    return None


def reference_signer(value: str, label: str):
    """The signer a key URI names, its public key already read from the device or service (exit 2 for a
    malformed reference or a key of another kind, 3 when the library, device or service is missing or
    unreachable)."""
    problem = shape_problem(value)
    if problem:
        raise InvalidInput(f"{label} {_shown(value)}: {problem}")
    if value == KEYLESS:
        from compiler.releases.keyless import ambient_signer

        return ambient_signer(label)
    scheme = value.split(":", 1)[0]
    from securesystemslib.signer import Signer

    pin = None
    if scheme == "hsm":
        pin = _hsm_ready(label, value)
    from securesystemslib.exceptions import UnsupportedLibraryError

    try:
        uri, public_key = _import(scheme, value)
    except UnsupportedLibraryError:
        raise EnvironmentProblem(
            f"{label} {_shown(value)}: the {scheme} signer's libraries are not installed; install {EXTRAS[scheme]}"
        ) from None
    except Exception as exc:  # each library raises its own (ValueError, botocore, google.api_core, azure.core)
        raise EnvironmentProblem(
            f"{label} {_shown(value)}: cannot read the public key ({redacted_reason(exc)}); check "
            "that the key exists and this job may use it"
        ) from None
    if public_key.scheme != SCHEME_P256:
        raise InvalidInput(
            f"{label} {_shown(value)}: a {public_key.scheme} key; only EC P-256 keys are accepted "
            "(AWS ECC_NIST_P256, GCP EC_SIGN_P256_SHA256, Azure P-256, PKCS#11 secp256r1)"
        )
    signer = Signer.from_priv_key_uri(uri, public_key, (lambda _message: pin) if pin is not None else None)
    try:  # one signature now: a wrong PIN or a key this job may read but not use fails before any work
        public_key.verify_signature(signer.sign(PROBE), PROBE)
    except Exception as exc:
        raise EnvironmentProblem(
            f"{label} {_shown(value)}: cannot sign with it ({redacted_reason(exc)}); check the "
            f"PIN (${PIN_ENV}) or this job's permission to sign"
        ) from None
    return signer


def exported_public_key(signer) -> str | None:
    """The PEM public key a verifier needs, for a signer whose private key is in an HSM or a KMS (a file key's
    public half is the publisher's own ``openssl pkey -pubout``; keyless needs none)."""
    from securesystemslib.signer import CryptoSigner, Signer

    if not isinstance(signer, Signer) or isinstance(signer, CryptoSigner):
        return None
    return signer.public_key.keyval.get("public")


def _hsm_ready(label: str, value: str) -> str:
    """The PIN, once the PKCS#11 library and module are there."""
    try:
        import pkcs11  # noqa: F401 - securesystemslib's HSM signer needs python-pkcs11
    except ImportError:
        raise EnvironmentProblem(
            f"{label} {_shown(value)}: python-pkcs11 is not installed; install {EXTRAS['hsm']}"
        ) from None
    module = os.environ.get(PKCS11_ENV)
    if not module or not Path(module).is_file():
        raise EnvironmentProblem(
            f"{label} {_shown(value)}: ${PKCS11_ENV} must name the HSM's PKCS#11 module "
            f"({'unset' if not module else 'no such file'}), e.g. "
            "/usr/lib/softhsm/libsofthsm2.so"
        )
    pin = os.environ.get(PIN_ENV)
    if not pin:
        raise InvalidInput(
            f"{label} {_shown(value)}: ${PIN_ENV} is not set; put the token's user PIN there from a CI secret"
        )
    return pin


def _import(scheme: str, value: str):
    """securesystemslib's URI and public key of the referenced key (a request to the device or service)."""
    from urllib.parse import parse_qsl, urlparse

    if scheme == "hsm":
        from securesystemslib.signer import HSMSigner

        parsed = urlparse(value)
        pin = os.environ[PIN_ENV]
        return HSMSigner.import_(
            int(parsed.path) if parsed.path else None, dict(parse_qsl(parsed.query)).get("label"), lambda _message: pin
        )
    if scheme == "awskms":
        from securesystemslib.signer import AWSSigner

        return AWSSigner.import_(value.removeprefix("awskms:"), SCHEME_P256)
    if scheme == "gcpkms":
        from securesystemslib.signer import GCPSigner

        return GCPSigner.import_(value.removeprefix("gcpkms:"))
    from securesystemslib.signer import AzureSigner

    match = SHAPES["azurekms"][0].fullmatch(value)
    _, key = AzureSigner.import_(match["vault"], match["key"])
    return value, key


def _shown(value: str) -> str:
    """A reference as an error line shows it: one line, at most 200 characters, and no query but a token label
    (a PIN written into the URI by mistake is not echoed)."""
    from compiler.core.text import printable

    base, mark, query = value.partition("?")
    if mark and not re.fullmatch(r"label=[A-Za-z0-9%+._-]{1,128}", query):
        value = base + "?…"
    return printable(value if len(value) <= 200 else value[:200] + "…")
