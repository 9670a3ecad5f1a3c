"""Hostile key values, signature and provenance bundles, and pipeline signing and cache fields (issue 39), through
the real CLI, held to the contract of tests/hostile (harness.py) plus each family's own clauses:

- ``key-values``: key material in several forms (a PEM, its base64 body, hex of the DER, a file's contents, made up
  key-ish text) where a key's place goes: a pipeline's signing.key, --sign-key, $COMPILE_SIGN_KEY, --verify-key,
  $COMPILE_VERIFY_KEY, --key. Exit 2 before the store is touched, and **no secret echoed**: no 8 characters of the
  value in a row appear on stdout or stderr.
- ``bundles``: a signed release whose signature.json or provenance.json is nested a million deep, huge, of the
  wrong JSON types, truncated, garbage, or carries a nested payload; given to verify, a verified pull and compile
  provenance: exit 1 when the command reads the damaged bundle, 0 when it does not; nothing written on a refusal.
- ``pipeline-fields``: hostile signing.key and cache values given to ``compile release --dry-run``: exit 2 for
  every value the real run refuses, and no credential or key material echoed.

    PYTHONPATH=. python -m pytest -q tests/hostile/test_hostile_keys.py
"""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st

from tests.hostile import generators as g
from tests.hostile.harness import Case, Expect, Sandbox, run_cases, snapshot, snapshot_changes
from tests.hostile.store_support import NAME, SKU, VERSION, verified_pull
from tests.support.cli import CliResult, run_cli
from tests.support.keys import write_keys

LEAK_RUN = 8
"""Characters of a secret in a row that count as echoing it."""
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def leaks(secret: str, output: str) -> list[str]:
    """``["secret echoed: ..."]`` when ``output`` holds :data:`LEAK_RUN` characters of ``secret`` in a row."""
    flat = "".join(secret.split())
    for start in range(len(flat) - LEAK_RUN + 1):
        if flat[start : start + LEAK_RUN] in output:
            return [f"secret echoed: {flat[start : start + LEAK_RUN]!r} of the key value is in the output"]
    return []


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def signed_store(tmp_path_factory, store_build, keys) -> Path:
    store = tmp_path_factory.mktemp("signed") / "store"
    done = run_cli(
        "publish", store_build, "--name", NAME, "--version", VERSION, "--store", store, "--sign-key", keys["p256"]
    )
    assert done.exit_code == 0, done.stderr
    return store


# --- key values -------------------------------------------------------------------------------------------------

FORMS = ("pem", "base64", "hex", "file-contents", "made-up")
PLACES = ("signing.key", "--sign-key", "COMPILE_SIGN_KEY", "--verify-key", "COMPILE_VERIFY_KEY", "--key")


@dataclass(frozen=True)
class KeyValueCase:
    form: str
    place: str
    key: str
    """Which key of write_keys the value is made of."""
    made_up: str = ""
    """Key-ish text of the recipe's own (the made-up form)."""


def _secret(recipe: KeyValueCase, keys: dict[str, Path]) -> str:
    text = keys[recipe.key].read_text()
    body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
    return {
        "pem": text,
        "base64": body,
        "hex": base64.b64decode(body).hex() if body else text.encode().hex(),
        "file-contents": text.strip(),
        "made-up": recipe.made_up,
    }[recipe.form]


def test_key_values(request, hostile_base, keys, signed_store):
    def setup(recipe: KeyValueCase, box: Sandbox) -> Case:
        secret = _secret(recipe, keys)
        env: dict[str, str] = {}
        store = box.inputs / "store"
        shutil.copytree(signed_store, store, symlinks=True)
        if recipe.place == "signing.key":
            pipeline = box.inputs / "pipeline.yaml"
            pipeline.write_text(
                f"release: {{name: {NAME}, version: 9.0.0}}\nmodel: {g.DIGITS_MODEL}\nprofiles: {g.DIGITS_PROFILES}\n"
                f"targets: {{{SKU}: [fp16]}}\nsigning:\n  key: {json.dumps(secret)}\n"
            )
            args = ["release", pipeline, "--dry-run", "--store", box.out / "store"]
        elif recipe.place in ("--sign-key", "COMPILE_SIGN_KEY"):
            args = [
                "publish",
                box.inputs / "no-build",
                "--name",
                NAME,
                "--version",
                "9.0.0",
                "--store",
                box.out / "store",
            ]
            if recipe.place == "--sign-key":
                args += ["--sign-key", secret]
            else:
                env["COMPILE_SIGN_KEY"] = secret
        else:
            command = "verify" if recipe.place == "--key" else "pull"
            args = [command, f"{NAME}@{VERSION}", "--store", store]
            if command == "pull":
                args += ["--sku", SKU, "--out", box.out / "digits.plan"]
            if recipe.place == "COMPILE_VERIFY_KEY":
                env["COMPILE_VERIFY_KEY"] = secret
            else:
                args += [recipe.place, secret]

        def after(result: CliResult) -> list[str]:
            written = [p.name for p in box.out.iterdir()] if box.out.is_dir() else []
            return leaks(secret, result.stdout + result.stderr) + ([f"wrote {written}"] if written else [])

        return Case(args, Expect(frozenset({2}), f"a key value at {recipe.place}"), False, env=env, after=after)

    made_up = st.text(
        st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="), min_size=16, max_size=300
    )
    strategy = st.builds(
        KeyValueCase,
        st.sampled_from(FORMS),
        st.sampled_from(PLACES),
        st.sampled_from(("p256", "ed25519", "rsa")),
        made_up,
    )
    must = [KeyValueCase(form, place, "p256", "MC4CAQAwBQYDK2VwBCIEIA" * 2) for form in FORMS for place in PLACES]
    must = [m for m in must if not (m.form == "pem" and m.place == "signing.key")] + [
        KeyValueCase("pem", "signing.key", "ed25519")
    ]
    run_cases(request.node.name, "key-values", strategy, setup, hostile_base, must)


# --- signature and provenance bundles ---------------------------------------------------------------------------

DAMAGE = ("nested", "huge", "wrong-type", "envelope-wrong-type", "payload-nested", "truncated", "garbage")
BUNDLE_COMMANDS = ("verify", "pull", "provenance")


@dataclass(frozen=True)
class BundleCase:
    kind: str
    damage: str
    command: str
    cut: float = 0.5
    """Where a truncated bundle ends (a fraction of its length)."""


def _damaged(original: bytes, damage: str, cut: float) -> bytes:
    nested = "[" * 1_000_000
    return {
        "nested": nested.encode(),
        "huge": b" " * (5 << 20) + b"{}",
        "wrong-type": json.dumps([BUNDLE, {"dsseEnvelope": None}]).encode(),
        "envelope-wrong-type": json.dumps(
            {"mediaType": BUNDLE, "dsseEnvelope": {"payload": 5, "signatures": "x"}}
        ).encode(),
        "payload-nested": json.dumps(
            {
                "mediaType": BUNDLE,
                "dsseEnvelope": {
                    "payload": base64.b64encode(b"[" * 100_000).decode(),
                    "payloadType": "application/vnd.in-toto+json",
                    "signatures": [{"keyid": "", "sig": base64.b64encode(b"x" * 64).decode()}],
                },
            }
        ).encode(),
        "truncated": original[: int(len(original) * cut)],
        "garbage": b"\x00\xff{" + original[:40],
    }[damage]


READS = {"verify": ("signature", "provenance"), "pull": ("signature",), "provenance": ("provenance",)}
"""The bundles each command reads: a damaged one fails it (exit 1); one it does not read leaves it at exit 0."""


def _bundle_codes(recipe: BundleCase) -> frozenset[int]:
    return frozenset({1 if recipe.kind in READS[recipe.command] else 0})


def test_bundles(request, hostile_base, keys, signed_store):
    def setup(recipe: BundleCase, box: Sandbox) -> Case:
        store = box.inputs / "store"
        shutil.copytree(signed_store, store, symlinks=True)
        path = store / "releases" / NAME / VERSION / f"{recipe.kind}.json"
        original = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(_damaged(original, recipe.damage, recipe.cut))
        box.out.mkdir(exist_ok=True)
        args = {
            "verify": ["verify", f"{NAME}@{VERSION}", "--key", keys["p256.pub"]],
            "pull": verified_pull(box.out / "x.plan", keys["p256.pub"]),
            "provenance": ["provenance", f"{NAME}@{VERSION}"],
        }[recipe.command]
        codes = _bundle_codes(recipe)
        kept = snapshot(box.out, [])

        def after(result: CliResult) -> list[str]:
            if result.exit_code == 0:
                return []
            changes = snapshot_changes(kept, snapshot(box.out, []))
            return [f"out/ changed on a refusal: {changes[:4]}"] if changes else []

        return Case(
            [*args, "--store", store],
            Expect(codes, f"a {recipe.damage} {recipe.kind}.json, {recipe.command}"),
            False,
            after=after,
        )

    strategy = st.builds(
        BundleCase,
        st.sampled_from(("signature", "provenance")),
        st.sampled_from(DAMAGE),
        st.sampled_from(BUNDLE_COMMANDS),
        st.floats(0.0, 0.99),
    )
    must = [
        BundleCase(kind, damage, command)
        for kind in ("signature", "provenance")
        for damage in DAMAGE
        for command in BUNDLE_COMMANDS
        if kind in READS[command]
    ]
    run_cases(request.node.name, "bundles", strategy, setup, hostile_base, must)


# --- pipeline signing and cache fields --------------------------------------------------------------------------

PASSWORD = "hunter2-Secret-9f8e7d"
CACHE_VALUES = (
    "ftp://x",
    "gs://bucket/cache",
    "http://host/cache",
    f"oci://user:{PASSWORD}@registry.example/cache",
    f"oci+http://user:{PASSWORD}@127.0.0.1:5000/cache",
    f"s3://AKIA:{PASSWORD}@bucket/cache",
    "s3://",
    "oci://",
    "s3://Bad_Bucket!/x",
    "://nothing",
)
"""Remote cache URIs the real run refuses (exit 2): no store's scheme, credentials in them, no bucket or host."""
SIGNING_VALUES = (
    "env://",
    "env://1BAD",
    "env://UNSET_KEY_VARIABLE_39",
    "hsm:two",
    "awskms:",
    "gcpkms:projects/x",
    "sigstore:extra",
    "-----BEGIN PRIVATE KEY-----",
    "ftp://keys/release.pem",
)


@dataclass(frozen=True)
class FieldCase:
    field: str
    value: str


def test_pipeline_fields(request, hostile_base):
    def setup(recipe: FieldCase, box: Sandbox) -> Case:
        pipeline = box.inputs / "pipeline.yaml"
        field = (
            f"cache: {json.dumps(recipe.value)}\n"
            if recipe.field == "cache"
            else f"signing: {{key: {json.dumps(recipe.value)}}}\n"
        )
        pipeline.write_text(
            f"release: {{name: {NAME}, version: 9.0.0}}\nmodel: {g.DIGITS_MODEL}\nprofiles: {g.DIGITS_PROFILES}\n"
            f"targets: {{{SKU}: [fp16]}}\nstore: {box.out / 'store'}\n" + field
        )

        def after(result: CliResult) -> list[str]:
            output = result.stdout + result.stderr
            return [f"the password {PASSWORD!r} is echoed"] if PASSWORD in output else []

        return Case(
            ["release", pipeline, "--dry-run"],
            Expect(frozenset({2}), f"{recipe.field}: {recipe.value}", (recipe.field, "signing.key", "remote cache")),
            False,
            env={"COMPILE_REMOTE_CACHE": ""},
            after=after,
        )

    values = st.one_of(
        st.builds(FieldCase, st.just("cache"), st.sampled_from(CACHE_VALUES)),
        st.builds(FieldCase, st.just("signing"), st.sampled_from(SIGNING_VALUES)),
    )
    must = [FieldCase("cache", v) for v in CACHE_VALUES] + [FieldCase("signing", v) for v in SIGNING_VALUES]
    run_cases(request.node.name, "pipeline-fields", values, setup, hostile_base, must)


# --- trust files: several public keys in one file ---------------------------------------------------------------

TRUST_DAMAGE = ("too-many", "rsa-among", "private-among", "garbage-between", "truncated-block", "nul-bytes", "huge")
TRUST_PLACES = ("--key", "--verify-key", "COMPILE_VERIFY_KEY")


@dataclass(frozen=True)
class TrustFileCase:
    damage: str
    place: str
    position: int = 0
    """Where the bad key stands among the good ones."""


def _trust_file(recipe: TrustFileCase, keys: dict[str, Path]) -> tuple[bytes, str]:
    """The file's bytes, and the secret it holds that no output may echo (empty when it holds none)."""
    good = [keys["p256.pub"].read_bytes(), keys["ed25519.pub"].read_bytes()]
    private = keys["ed25519"].read_text()
    bad = {
        "rsa-among": keys["rsa.pub"].read_bytes(),
        "private-among": private.encode(),
        "garbage-between": b"\x00\xffnot a key\n",
        "truncated-block": keys["p256.pub"].read_bytes()[:60],
        "nul-bytes": keys["p256.pub"].read_bytes().replace(b"\n", b"\n\x00", 1),
    }
    if recipe.damage == "too-many":
        return good[0] * 17, ""
    if recipe.damage == "huge":
        return good[0] + b" " * (1 << 20), ""
    keys_in = list(good)
    keys_in.insert(recipe.position % 3, bad[recipe.damage])
    secret = "".join(line for line in private.splitlines() if not line.startswith("-----"))
    return b"".join(keys_in), secret if recipe.damage == "private-among" else ""


def test_trust_files(request, hostile_base, keys, signed_store):
    """A trust file of several keys (a rotation) that is damaged: exit 2 before anything is written, naming the
    file, and no private key material echoed."""

    def setup(recipe: TrustFileCase, box: Sandbox) -> Case:
        data, secret = _trust_file(recipe, keys)
        trusted = box.inputs / "trusted.pub"
        trusted.write_bytes(data)
        store = box.inputs / "store"
        shutil.copytree(signed_store, store, symlinks=True)
        command = "verify" if recipe.place == "--key" else "pull"
        args = [command, f"{NAME}@{VERSION}", "--store", store]
        env: dict[str, str] = {}
        if command == "pull":
            args += ["--sku", SKU, "--out", box.out / "digits.plan"]
        if recipe.place == "COMPILE_VERIFY_KEY":
            env["COMPILE_VERIFY_KEY"] = str(trusted)
        else:
            args += [recipe.place, trusted]

        def after(result: CliResult) -> list[str]:
            written = [p.name for p in box.out.iterdir()] if box.out.is_dir() else []
            problems = leaks(secret, result.stdout + result.stderr) if secret else []
            return problems + ([f"wrote {written}"] if written else [])

        return Case(args, Expect(frozenset({2}), f"a trust file with {recipe.damage}"), False, env=env, after=after)

    strategy = st.builds(TrustFileCase, st.sampled_from(TRUST_DAMAGE), st.sampled_from(TRUST_PLACES), st.integers(0, 2))
    must = [TrustFileCase(damage, place) for damage in TRUST_DAMAGE for place in TRUST_PLACES[:2]]
    run_cases(request.node.name, "trust-files", strategy, setup, hostile_base, must)


# --- signed channel moves ---------------------------------------------------------------------------------------

CHANNEL_DAMAGE = ("nested", "huge", "wrong-type", "truncated", "garbage", "other-version", "sequence", "stripped")


@dataclass(frozen=True)
class ChannelCase:
    damage: str
    verified: bool
    cut: float = 0.5


@pytest.fixture(scope="module")
def channel_store(tmp_path_factory, store_build, keys) -> Path:
    """digits 1.0.0 and 2.0.0 signed, ``stable`` promoted to 1.0.0 with the key."""
    from compiler.releases.channels import promote
    from compiler.releases.signing import load_signer

    store = tmp_path_factory.mktemp("channels") / "store"
    for version in (VERSION, "2.0.0"):
        done = run_cli("publish", store_build, "--name", NAME, "--version", version, "--store", store,
                       "--sign-key", keys["p256"])  # fmt: skip
        assert done.exit_code == 0, done.stderr
    promote(str(store), f"{NAME}@{VERSION}", "stable", signer=load_signer(keys["p256"]))
    return store


def _damaged_channel(record: dict, damage: str, cut: float) -> bytes:
    signature = record["signature"]
    changed = dict(record)
    if damage in ("nested", "huge", "truncated", "garbage"):
        changed["signature"] = _damaged(signature.encode(), damage, cut).decode("latin-1")
    elif damage == "wrong-type":
        changed["signature"] = 12
    elif damage == "other-version":
        changed["version"] = "2.0.0"
    elif damage == "sequence":
        changed["sequence"] = record["sequence"] + 5
    else:
        changed["signature"] = None
    return json.dumps(changed).encode()


def test_channel_signatures(request, hostile_base, keys, channel_store):
    """A signed channel whose record is damaged or redirected: a verifying pull of NAME@CHANNEL refuses it (exit 1,
    nothing written; exit 2 where the record is no record at all), an unverifying one is not the judge of it."""

    def setup(recipe: ChannelCase, box: Sandbox) -> Case:
        store = box.inputs / "store"
        shutil.copytree(channel_store, store, symlinks=True)
        path = store / "channels" / NAME / "stable"
        path.chmod(0o644)
        path.write_bytes(_damaged_channel(json.loads(path.read_bytes()), recipe.damage, recipe.cut))
        box.out.mkdir(exist_ok=True)
        args = ["pull", f"{NAME}@stable", "--sku", SKU, "--out", box.out / "x.plan", "--store", store]
        if recipe.verified:
            args += ["--verify-key", keys["p256.pub"]]
        codes = frozenset({1, 2}) if recipe.verified else frozenset({0, 1, 2})
        kept = snapshot(box.out, [])

        def after(result: CliResult) -> list[str]:
            if result.exit_code == 0:
                return [] if not recipe.verified else ["a verifying pull took a damaged channel"]
            changes = snapshot_changes(kept, snapshot(box.out, []))
            return [f"out/ changed on a refusal: {changes[:4]}"] if changes else []

        return Case(args, Expect(codes, f"a channel with {recipe.damage}"), False, after=after)

    strategy = st.builds(ChannelCase, st.sampled_from(CHANNEL_DAMAGE), st.booleans(), st.floats(0.0, 0.99))
    must = [ChannelCase(damage, True) for damage in CHANNEL_DAMAGE]
    run_cases(request.node.name, "channel-signatures", strategy, setup, hostile_base, must)
