"""Every bash block of README.md and docs/*.md runs as written (issue 43), in a copy of the repository.

Each page's blocks run in order in one `bash -euo pipefail` session, so a later block sees what an earlier one made;
the working directory is a fresh copy of the tracked files (the commands write calibrated/, engines/, artifacts/),
with the venv's `compile` on PATH. A block that cannot run here carries `<!-- not run: REASON -->`
(test_docs_fences.REASONS). A page whose commands need state made elsewhere gets it from SETUP below; S3 buckets and
the registry host the pages name are the session's local SeaweedFS and registry (S3_BUCKET, REGISTRY below).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_docs_fences import PAGES, ROOT, blocks

RELEASE = "compile release pipelines/example.yaml > /dev/null"
ENGINES = (
    "compile build compiler/examples/digits_cnn.onnx --profiles profiles/digits.yaml --sku rtx-4090"
    " --precision fp32 --precision int8 --data compiler/examples/digits.npz --out engines > /dev/null"
)
# What a page's commands need that the page does not make itself, as the README's walk-through leaves it: the
# example's release (digits@1.0.0 in ./artifacts, its work folder release/digits-1.0.0) and a build folder engines/.
SETUP = {
    "check.md": ENGINES,
    "store-oci.md": ENGINES,
    "provenance.md": f"{RELEASE}\n{ENGINES}",
    "serving.md": RELEASE,
    "store.md": RELEASE,
}
# An S3 bucket a page's commands name (s3://ci-cache/compile) is made on the session's local SeaweedFS, which the
# page's shell reaches through AWS_ENDPOINT_URL and its credentials: the commands run as written, against it.
S3_BUCKET = re.compile(r"s3://([a-z0-9][a-z0-9.-]+)")
# The registry host the pages use, registry.example, is the session's local registry (CNCF Distribution), which
# speaks plain HTTP: the one substitution made in a page's commands.
REGISTRY = "oci://registry.example/"
# A python block whose first line is `# NAME.py` is that file (check.md's metrics.py): the page's commands use it.
SOURCE_FILE = re.compile(r"^# ([\w./-]+\.py)\n")
PAGE_TIMEOUT = 300


def commands(page: Path) -> list[tuple[int, str]]:
    """(line, body) of the page's bash blocks that run here, in page order."""
    return [(line, body) for line, language, reason, body in blocks(page) if language == "bash" and not reason]


def write_source_files(page: Path, copy: Path) -> None:
    """The page's named python blocks, written where its commands expect them."""
    for _, language, _, body in blocks(page):
        named = SOURCE_FILE.match(body + "\n") if language == "python" else None
        if named:
            (copy / named.group(1)).write_text(body + "\n")


def script(page: Path, registry: str = REGISTRY) -> str:
    """The page's shell session: its setup, then each block, announced by its line so a failure names it."""
    parts = [SETUP.get(page.name, "")]
    for line, body in commands(page):
        parts += [f"echo '>>> {page.name}:{line}' >&2", body.replace(REGISTRY, registry)]
    return "\n".join(parts) + "\n"


def local_registry(page: Path, request: pytest.FixtureRequest) -> str:
    """The local registry's address in place of registry.example, when the page names it."""
    if not any(REGISTRY in body for _, body in commands(page)):
        return REGISTRY
    return f"oci+http://{request.getfixturevalue('registry').host}/"


def s3_environment(page: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """The local S3 server's AWS settings, with the buckets the page names, when it names any."""
    buckets = {bucket for _, body in commands(page) for bucket in S3_BUCKET.findall(body)}
    if not buckets:
        return {}
    server = request.getfixturevalue("s3")
    client = server.client()
    for bucket in buckets - {found["Name"] for found in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=bucket)
    return {name: value for name, value in server.env().items() if name.startswith("AWS_")}


def copy_of_repository(into: Path) -> Path:
    """The tracked files, as a checkout would have them, so a command's outputs never land in the repository."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def run_page(
    page: Path, copy: Path, environment: dict[str, str], registry: str = REGISTRY
) -> subprocess.CompletedProcess:
    """The page's session in the copy, with the venv's `compile` first on PATH and the copy's code imported; nothing
    of the caller's COMPILE_ or AWS_ settings leaks in (a real bucket, a remote cache)."""
    inherited = {name: value for name, value in os.environ.items() if not name.startswith(("COMPILE_", "AWS_"))}
    env = {
        **inherited,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(copy),
        "HOME": str(copy.parent / "home"),
        **environment,
    }
    (copy.parent / "home").mkdir(exist_ok=True)
    write_source_files(page, copy)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script(page, registry)],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )


@pytest.mark.parametrize("page", [page for page in PAGES if commands(page)], ids=lambda page: page.name)
def test_page_commands_run_as_written(
    page: Path, tmp_path: Path, private_build_cache: Path, request: pytest.FixtureRequest
) -> None:
    copy = copy_of_repository(tmp_path / "repo")
    environment = {"COMPILE_CACHE_DIR": str(private_build_cache), **s3_environment(page, request)}
    ran = run_page(page, copy, environment, local_registry(page, request))
    assert ran.returncode == 0, f"{page.name}: exit {ran.returncode}\n{ran.stderr[-4000:]}"


def test_setup_is_for_pages_that_run() -> None:
    assert set(SETUP) <= {page.name for page in PAGES if commands(page)}


def test_a_page_is_one_session_and_its_failing_block_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\necho made > made.txt\n```\n<!-- not run: needs a GPU -->\n```bash\nexit 7\n```\n"
        "```python\n# tool.py\nprint('from the page')\n```\n"
        "```bash\ngrep -q made made.txt && python tool.py\nfalse | cat\necho never\n```\n"
    )
    copy = tmp_path / "copy"
    copy.mkdir()
    ran = run_page(page, copy, {})
    assert ran.returncode == 1
    assert ran.stdout == "from the page\n"
    assert ran.stderr.splitlines() == [">>> page.md:1", ">>> page.md:12"]
