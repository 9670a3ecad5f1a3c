"""A real HSM in software for the signing tests: SoftHSM2 (Debian's softhsm2, which .ci/run installs), one token
holding an EC P-256 key pair (PKCS#11 id 2, the id securesystemslib's HSM signer uses by default) and a P-384 one
(id 3), reached through its PKCS#11 module as a hardware token would be."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")
LABEL = "release"
PIN = "1234"
URI = f"hsm:2?label={LABEL}"


def softhsm_token(folder: Path) -> dict[str, str]:
    """A fresh token under ``folder``: the environment that reaches it (config, module and PIN)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    tool = shutil.which("softhsm2-util")
    assert tool and MODULE.is_file(), "SoftHSM2 is missing: apt-get install softhsm2 (.ci/run installs it)"
    (folder / "tokens").mkdir(parents=True)
    config = folder / "softhsm2.conf"
    config.write_text(f"directories.tokendir = {folder / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    env = {"SOFTHSM2_CONF": str(config)}
    run = {"env": {"PATH": "/usr/bin:/bin", **env}, "check": True, "capture_output": True}
    subprocess.run([tool, "--init-token", "--free", "--label", LABEL, "--so-pin", "5678", "--pin", PIN], **run)
    for key_id, curve in (("02", ec.SECP256R1()), ("03", ec.SECP384R1())):
        pem = folder / f"key{key_id}.pem"
        pem.write_bytes(
            ec.generate_private_key(curve).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        subprocess.run(
            [tool, "--import", str(pem), "--token", LABEL, "--label", f"key{key_id}", "--id", key_id, "--pin", PIN],
            **run,
        )
        pem.unlink()  # the private key lives in the token only
    return {**env, "PYKCS11LIB": str(MODULE), "COMPILE_HSM_PIN": PIN}
