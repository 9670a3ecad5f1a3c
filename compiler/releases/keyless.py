"""Sigstore keyless signing and verification (sigstore-python): a CI job signs with its OIDC identity (GitHub
Actions' ``id-token: write``), Fulcio certifies a short-lived key for it and Rekor logs the signature; a verifier
names the identity and issuer it trusts instead of holding a key.

The bundle (``sign_dsse`` over the same in-toto statements a key signs) goes where a keyed bundle goes, so the
store and cosign see one format. Signing needs the ambient credential, Fulcio and Rekor; verifying needs Sigstore's
trust root (TUF). None of that can be reached here: what runs without them (no credential, a key-signed or
malformed bundle, bad options) is refused before any request.
"""

from __future__ import annotations

from typing import Any

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.jsonio import parse_json
from compiler.core.text import redacted_reason
from compiler.stores.base import MAX_ATTACHMENT_BYTES

BUNDLE_PREFIX = "application/vnd.dev.sigstore.bundle"
INSTALL = "install compile's [sigstore] extra (sigstore==4.5.1)"


class KeylessSigner:
    """Signs statements as the CI's OIDC identity; made only once a credential was found."""

    def __init__(self, token: Any, label: str):
        self._token, self._label, self._signer = token, label, None
        self.identity = token.identity

    def sign_statement(self, payload: bytes) -> bytes:
        """A Sigstore bundle (Fulcio certificate, Rekor entry) of the in-toto statement ``payload``."""
        from sigstore.dsse import Statement

        try:
            if self._signer is None:
                from sigstore.models import ClientTrustConfig
                from sigstore.sign import Signer, SigningContext

                context = SigningContext.from_trust_config(ClientTrustConfig.production())
                self._signer = Signer(self._token, context, cache=True)
            return self._signer.sign_dsse(Statement(payload)).to_json().encode()
        except Exception as exc:  # network, Fulcio or Rekor refusals: sigstore raises its own and requests' errors
            raise EnvironmentProblem(
                f"{self._label} sigstore: keyless signing failed ({redacted_reason(exc)}); "
                "publishing again adds the signature"
            ) from None


def ambient_signer(label: str) -> KeylessSigner:
    """The keyless signer of this CI job's OIDC identity; exit 3 before any work when there is none."""
    try:
        from sigstore.oidc import IdentityToken, detect_credential
    except ImportError:
        raise EnvironmentProblem(f"{label} sigstore: sigstore is not installed; {INSTALL}") from None
    try:
        token = detect_credential()
    except Exception as exc:  # sigstore's IdentityError: a CI that offers a credential but refused it
        raise EnvironmentProblem(
            f"{label} sigstore: the CI's OIDC credential could not be had "
            f"({redacted_reason(exc)}); on GitHub Actions give the job `permissions: id-token: "
            "write`"
        ) from None
    if token is None:
        raise EnvironmentProblem(
            f"{label} sigstore: no ambient OIDC credential (keyless signing runs in CI: on "
            "GitHub Actions give the job `permissions: id-token: write`); elsewhere sign with a "
            "key file, an HSM or a KMS key"
        )
    try:
        return KeylessSigner(IdentityToken(token), label)
    except Exception as exc:  # an expired or malformed token
        raise EnvironmentProblem(
            f"{label} sigstore: the CI's OIDC token is not usable ({redacted_reason(exc)})"
        ) from None


class KeylessIdentity:
    """Whom a verifier trusts for keyless releases: the certificate's identity (SAN) and its OIDC issuer, and
    where given the source repository and ref the certificate names (Fulcio's extensions 1.3.6.1.4.1.57264.1.12
    and .14). Under a shared reusable workflow the identity is that workflow for every repository that calls it,
    so only the source repository says whose release it is."""

    def __init__(self, identity: str, issuer: str, source_repository: str | None = None, source_ref: str | None = None):
        if not identity or len(identity) > 1024 or any(c in identity for c in "\n\r\0"):
            raise InvalidInput(
                "--identity: give the signer's identity as Fulcio certifies it (a GitHub workflow "
                "URL such as https://github.com/ORG/REPO/.github/workflows/release.yml@refs/heads/"
                "main, or an email)"
            )
        if not issuer.startswith("https://") or len(issuer) > 1024 or any(c in issuer for c in " \n\r\0"):
            raise InvalidInput(
                "--issuer: give the OIDC issuer's https URL (GitHub Actions: "
                "https://token.actions.githubusercontent.com)"
            )
        for flag, value, form in (
            ("--source-repository", source_repository, "https://github.com/ORG/REPO"),
            ("--source-ref", source_ref, "refs/tags/v1.0.0"),
        ):
            if value is not None and (not value or len(value) > 1024 or any(c in value for c in " \n\r\0")):
                raise InvalidInput(f"{flag}: give it as the signer's certificate names it (e.g. {form})")
        self.identity, self.issuer = identity, issuer
        self.source_repository, self.source_ref = source_repository, source_ref

    def __str__(self) -> str:
        bound = [f"repository {self.source_repository}"] * bool(self.source_repository)
        bound += [f"ref {self.source_ref}"] * bool(self.source_ref)
        return f"{self.identity} (issuer {self.issuer}{''.join(', ' + b for b in bound)})"

    def policy(self):
        """sigstore-python's verification policy: the identity and issuer, and the source repository and ref."""
        from sigstore.verify import policy

        rules = [policy.Identity(identity=self.identity, issuer=self.issuer)]
        if self.source_repository:
            rules.append(policy.OIDCSourceRepositoryURI(self.source_repository))
        if self.source_ref:
            rules.append(policy.OIDCSourceRepositoryRef(self.source_ref))
        return rules[0] if len(rules) == 1 else policy.AllOf(rules)

    def verify(self, data: bytes, what: str, payload_type: str) -> dict[str, Any]:
        """The statement of a keyless bundle whose certificate names this identity and issuer; CheckFailed for
        a key-signed, malformed or other identity's bundle; exit 3 when Sigstore's trust root cannot be had."""
        try:
            parsed = parse_json(data, MAX_ATTACHMENT_BYTES)
            material = parsed.get("verificationMaterial") if isinstance(parsed, dict) else None
        except ValueError:
            parsed = material = None
        if isinstance(material, dict) and "publicKey" in material:
            raise CheckFailed(
                f"{what} is key-signed (a public-key bundle), not signed keyless by an identity; "
                "verify it with --key PUB.pem"
            )
        try:
            from sigstore.models import Bundle
        except ImportError:
            raise EnvironmentProblem(f"--identity: sigstore is not installed; {INSTALL}") from None
        try:
            if not isinstance(parsed, dict) or not str(parsed.get("mediaType", "")).startswith(BUNDLE_PREFIX):
                raise ValueError("no Sigstore bundle mediaType")
            bundle = Bundle.from_json(data)
        except Exception as exc:  # sigstore's InvalidBundle, pydantic's ValidationError, ValueError
            raise CheckFailed(f"{what} is not a keyless Sigstore bundle ({redacted_reason(exc)})") from None
        from sigstore.verify import Verifier

        try:
            verifier = Verifier.production()
        except Exception as exc:  # TUF cannot reach Sigstore's trust root
            raise EnvironmentProblem(
                f"--identity: Sigstore's trust root could not be had ({redacted_reason(exc)}); "
                "keyless verification needs to reach it once (then it is cached)"
            ) from None
        try:
            kind, payload = verifier.verify_dsse(bundle, self.policy())
        except Exception as exc:  # sigstore's VerificationError and the certificate checks it wraps
            raise CheckFailed(f"{what}: bad signature: not signed by {self} ({redacted_reason(exc)})") from None
        if kind != payload_type:
            raise CheckFailed(f"{what}: its envelope carries {str(kind)[:80]}, not an in-toto statement")
        try:
            return parse_json(payload, MAX_ATTACHMENT_BYTES)
        except ValueError:
            raise CheckFailed(f"{what}: its statement is not JSON") from None
