"""Signing keys for the tests, written as `openssl genpkey` writes them (PKCS#8 PEM), and the key files a user may
give by mistake."""

from __future__ import annotations

from pathlib import Path


def write_keys(folder: Path) -> dict[str, Path]:
    """Ed25519 and EC P-256 key pairs (``NAME`` private, ``NAME.pub`` public), and hostile ones: RSA, EC P-384,
    a passphrase-encrypted key, a key that is not PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    private = {
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "p256": ec.generate_private_key(ec.SECP256R1()),
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "p384": ec.generate_private_key(ec.SECP384R1()),
    }
    paths = {}
    for name, key in private.items():
        paths[name] = folder / f"{name}.pem"
        paths[name].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        paths[f"{name}.pub"] = folder / f"{name}.pub"
        paths[f"{name}.pub"].write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    paths["encrypted"] = folder / "encrypted.pem"
    paths["encrypted"].write_bytes(
        private["ed25519"].private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    paths["not-pem"] = folder / "not-pem.pem"
    paths["not-pem"].write_bytes(b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    return paths
