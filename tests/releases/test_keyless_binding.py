"""Keyless trust bound to a source repository and ref. Under a shared reusable workflow, Fulcio certifies that
workflow as the identity for every repository that calls it, so `--identity --issuer` alone would accept another
team's release; the source repository and ref the certificate names (Fulcio's extensions .1.12 and .1.14) say whose
it is. Checked with sigstore-python's own policy code on real X.509 certificates shaped as Fulcio issues them."""

from __future__ import annotations

import datetime

import pytest
from asn1crypto.core import UTF8String
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sigstore.verify.policy import VerificationError

from compiler.core.errors import InvalidInput
from compiler.releases.keyless import KeylessIdentity

ISSUER = "https://token.actions.githubusercontent.com"
SHARED = "https://github.com/acme/ci/.github/workflows/trt-release.yml@refs/tags/v2"


def _fulcio_like(repository: str, ref: str) -> x509.Certificate:
    """A certificate as Fulcio issues one to a GitHub Actions job of ``repository`` at ``ref`` that runs the
    shared workflow."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.dev")])
    now = datetime.datetime.now(datetime.UTC)

    def extension(oid: str, value: bytes) -> x509.UnrecognizedExtension:
        return x509.UnrecognizedExtension(x509.ObjectIdentifier(f"1.3.6.1.4.1.57264.1.{oid}"), value)

    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(minutes=10))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(SHARED)]), critical=True)
        .add_extension(extension("1", ISSUER.encode()), critical=False)
        .add_extension(extension("8", UTF8String(ISSUER).dump()), critical=False)
        .add_extension(extension("12", UTF8String(repository).dump()), critical=False)
        .add_extension(extension("14", UTF8String(ref).dump()), critical=False)
        .sign(key, hashes.SHA256())
    )


OURS = _fulcio_like("https://github.com/acme/models", "refs/tags/v1.0.0")
THEIRS = _fulcio_like("https://github.com/other/models", "refs/tags/v1.0.0")
BRANCH = _fulcio_like("https://github.com/acme/models", "refs/heads/experiment")


def test_identity_and_issuer_alone_accept_any_caller_of_a_shared_workflow():
    trust = KeylessIdentity(SHARED, ISSUER).policy()
    trust.verify(OURS)
    trust.verify(THEIRS)  # the weakness the binding closes


def test_a_bound_repository_refuses_another_caller_of_the_shared_workflow():
    trust = KeylessIdentity(SHARED, ISSUER, source_repository="https://github.com/acme/models").policy()
    trust.verify(OURS)
    with pytest.raises(VerificationError, match="SourceRepositoryURI"):
        trust.verify(THEIRS)


def test_a_bound_ref_refuses_a_release_from_another_ref():
    trust = KeylessIdentity(
        SHARED, ISSUER, source_repository="https://github.com/acme/models", source_ref="refs/tags/v1.0.0"
    ).policy()
    trust.verify(OURS)
    with pytest.raises(VerificationError, match="SourceRepositoryRef"):
        trust.verify(BRANCH)


@pytest.mark.parametrize("field", ["source_repository", "source_ref"])
@pytest.mark.parametrize("value", ["", "has space", "x" * 1025, "line\nbreak"])
def test_a_malformed_binding_is_bad_input(field, value):
    with pytest.raises(InvalidInput, match=field.replace("_", "-")):
        KeylessIdentity(SHARED, ISSUER, **{field: value})


def test_the_command_line_binds_the_identity_and_refuses_a_binding_without_one(tmp_path):
    from tests.support.cli import assert_clean_error, run_cli

    (tmp_path / "store").mkdir()
    alone = run_cli("verify", "digits@1.0.0", "--store", tmp_path / "store", "--source-ref", "refs/tags/v1")
    assert_clean_error(alone, 2, "--source-ref", "--identity")
    bad = run_cli("verify", "digits@1.0.0", "--store", tmp_path / "store", "--identity", SHARED, "--issuer", ISSUER,
                  "--source-repository", "not a url")  # fmt: skip
    assert_clean_error(bad, 2, "--source-repository")
