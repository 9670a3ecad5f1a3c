"""Hostile OCI registry answers (issue 29), one test per class, through the real CLI against a hostile registry in
front of the real one (tests/support/hostile_registry.py): nothing a registry answers crashes the tool, hangs it,
or is read whole; each is one error line with the documented exit code (1: the store's content is damaged; 3: the
registry is not one the tool can use)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from compiler.core.records import EngineRecord
from tests.support.cli import CliResult, assert_clean_error, run_cli
from tests.support.hostile_registry import Answer, HostileRegistry, endless, hostile_registry, nested
from tests.support.registry import environment_without_credentials

BOUND = 64 << 20
"""Body bytes a bounded reader may have let the registry send: its 4 MiB cap, plus what the sockets buffer."""


@pytest.fixture(scope="module")
def published(registry, tmp_path_factory, built_digits) -> tuple[str, Path]:
    """digits@1.0.0 (fp16 for rtx-4090) published to a repository of the real registry, and its build folder."""
    root = tmp_path_factory.mktemp("hostile-registry")
    build = built_digits(("rtx-4090",), ("fp16",))
    repository = "h" + uuid.uuid4().hex[:12]
    env = environment_without_credentials(root)
    done = run_cli(
        "publish", build, "--name", "digits", "--version", "1.0.0", "--store", registry.uri(repository), env=env
    )
    assert done.exit_code == 0, done.stderr
    assert (
        run_cli(
            "promote", "digits@1.0.0", "--channel", "stable", "--store", registry.uri(repository), env=env
        ).exit_code
        == 0
    )
    return repository, build


@pytest.fixture(scope="module")
def hostile(registry):
    with hostile_registry(registry) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(hostile):
    hostile.reset()


def _cli(hostile: HostileRegistry, repository: str, tmp_path: Path, *args: str | Path) -> CliResult:
    return run_cli(
        *args, "--store", hostile.uri(repository), env=environment_without_credentials(tmp_path), timeout=120
    )


def _pull(hostile, repository, tmp_path) -> tuple[CliResult, Path]:
    out = tmp_path / "out" / "digits.plan"
    out.parent.mkdir(exist_ok=True)
    return _cli(
        hostile, repository, tmp_path, "pull", "digits@1.0.0", "--sku", "rtx-4090", "--out", out, "--no-cache"
    ), out


def _nothing_in(folder: Path) -> None:
    assert not any(folder.iterdir()), list(folder.iterdir())


@pytest.mark.parametrize(
    "target, command",
    [
        (r"/manifests/1\.0\.0$", "pull"),
        (r"/tags/list", "ls NAME"),
        (r"/_catalog", "ls"),
        (r"/manifests/_channel\.stable$", "pull channel"),
    ],
)
def test_json_nested_100k_deep_is_not_json_not_a_crash(hostile, published, tmp_path, target, command):
    repository, _ = published
    hostile.answer("GET", target, Answer(body=nested(), headers={"Content-Type": "application/json"}))
    if command == "pull":
        result, out = _pull(hostile, repository, tmp_path)
        _nothing_in(out.parent)
    else:
        args = {"ls NAME": ["ls", "digits"], "ls": ["ls"], "pull channel": ["ls", "digits@stable"]}[command]
        result = _cli(hostile, repository, tmp_path, *args)
    line = assert_clean_error(result, 1 if "manifests" in target else 3)
    assert "internal error" not in line and "Recursion" not in line


def test_a_token_or_error_body_nested_100k_deep_is_not_a_crash(hostile, published, tmp_path):
    repository, _ = published
    realm = f"http://{hostile.host}/token"
    hostile.answer(
        "GET",
        r"/tags/list",
        lambda r: (
            None
            if "Authorization" in r.headers
            else Answer(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="x",scope="y"'}, nested())
        ),
    )
    hostile.answer("GET", r"^/token", Answer(body=nested()))
    assert_clean_error(_cli(hostile, repository, tmp_path, "ls", "digits"), 3, "token")
    hostile.reset()
    hostile.answer("GET", r"/tags/list", Answer(500, body=nested()))
    assert_clean_error(_cli(hostile, repository, tmp_path, "ls", "digits"), 3, "500")


def test_a_blob_size_that_is_no_number_is_damage(hostile, published, tmp_path):
    repository, build = published
    hostile.answer("HEAD", r"/blobs/sha256:", Answer(headers={"Content-Length": "abc"}))
    result = _cli(hostile, repository, tmp_path, "publish", build, "--name", "digits", "--version", "1.0.1")
    assert_clean_error(result, 1, "'abc'")


@pytest.mark.parametrize("listing", ["tags", "catalog"])
@pytest.mark.parametrize("pages", ["loop", "endless", "elsewhere"])
def test_pagination_that_never_ends_or_leads_back_stops(hostile, published, tmp_path, listing, pages):
    repository, _ = published
    path = "/_catalog" if listing == "catalog" else f"/v2/{repository}/digits/tags/list"
    field = "repositories" if listing == "catalog" else "tags"

    def page(request) -> Answer:
        number = int(request.path.rpartition("page=")[2]) if "page=" in request.path else 0
        after = {"loop": number, "endless": number + 1}.get(pages)
        link = f"<{path}?n=1000&page={after}>" if after is not None else "<http://example.com/v2/_catalog>"
        return Answer(
            headers={"Link": f'{link}; rel="next"', "Content-Type": "application/json"},
            body=json.dumps({field: [f"x{number}"]}).encode(),
        )

    hostile.answer("GET", path.replace(".", r"\."), page)
    result = _cli(hostile, repository, tmp_path, *(["ls"] if listing == "catalog" else ["ls", "digits"]))
    assert_clean_error(result, 1, "page" if pages != "elsewhere" else "another host")
    assert len(hostile.requests) <= 10_010


@pytest.mark.parametrize("what", ["manifest", "config blob", "plan blob"])
def test_an_endless_answer_is_read_no_further_than_its_bound(hostile, published, tmp_path, what):
    repository, build = published
    record = EngineRecord.model_validate_json((build / "rtx-4090" / "fp16" / "engine.json").read_bytes())
    pattern = {
        "manifest": r"/manifests/1\.0\.0$",
        "plan blob": f"/blobs/sha256:{record.sha256}$",
        "config blob": r"/blobs/sha256:(?!" + record.sha256 + ")",
    }[what]
    hostile.answer("GET", pattern, Answer(body=endless(b"{")))
    result, out = _pull(hostile, repository, tmp_path)
    assert_clean_error(result, 3 if what == "manifest" else 1)
    assert sum(hostile.sent.values()) < BOUND, hostile.sent
    _nothing_in(out.parent)
    if what == "plan blob":
        [asked] = [r for r in hostile.requests if r.path.endswith(record.sha256) and r.method == "GET"]
        assert asked.headers.get("Range") == f"bytes=0-{record.size_bytes}"


def test_a_pull_through_the_hostile_registry_passing_everything_works(hostile, published, tmp_path):
    """The proxy itself is faithful: with no hostile answer, pulls verify (else the tests above prove nothing)."""
    repository, build = published
    result, out = _pull(hostile, repository, tmp_path)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() == (build / "rtx-4090" / "fp16" / "engine.plan").read_bytes()
