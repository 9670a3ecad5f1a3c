"""``compile export triton``: a release as a Triton model repository, one plan per compute capability.

    DIR/<model>/config.pbtxt          platform tensorrt_plan, cc_model_filenames, inputs/outputs, profiles
    DIR/<model>/<N>/<sku>-<precision>.plan

Triton picks the plan by the GPU's compute capability as the exact string ``"<major>.<minor>"`` in
``cc_model_filenames``; ``default_model_filename`` is left unset unless asked, so a GPU the release has no engine
for fails to load the model instead of loading a plan built for another GPU. Every plan is fetched through the
pull's verified path (streamed, hashed, compared with the manifest) into a staged folder renamed into place; an
existing version folder is never overwritten with other content (exit 4).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from compiler.core.errors import Conflict, EnvironmentProblem, InvalidInput
from compiler.core.files import default_cache_dir, sweep_partials, write_atomic
from compiler.core.records import ReleaseEngine, ReleaseManifest, TensorSignature
from compiler.releases.manifest import resolve
from compiler.releases.pull import fetch_verified
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

MODEL_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
TRITON_TYPES = {"bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
                "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
                "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
                "bfloat16": "TYPE_BF16", "object": "TYPE_STRING"}
"""numpy's type names (what a release records) to Triton's DataType."""
CONFIG = "config.pbtxt"


class TritonExport(BaseModel):
    release: str
    version: str
    model: str
    model_dir: str
    triton_version: int
    status: str
    """``written``, or ``unchanged`` when the repository already held this version with these plans."""
    plans: dict[str, str]
    """Compute capability -> plan file (in the version folder)."""
    sha256: dict[str, str]
    """Plan file -> sha256, as verified while written."""
    seconds: float


def export_triton(store: str | Store, ref: str | Ref, repo: Path, *, model_name: str | None = None,
                  precision: str | None = None, triton_version: int = 1, default_plan: str | None = None,
                  cache_dir: Path | None = None, use_cache: bool = True) -> TritonExport:
    """Write ``ref`` into the Triton model repository ``repo`` as ``<model>/<triton_version>/``. ``default_plan``
    (a compute capability of the release) also sets ``default_model_filename`` to that plan."""
    started = time.monotonic()
    repo = Path(repo)
    if not repo.is_dir():
        raise InvalidInput(f"--repo {repo}: not a folder; create the model repository folder first")
    if isinstance(triton_version, bool) or not isinstance(triton_version, int) or not 1 <= triton_version < 2**63:
        raise InvalidInput(f"--triton-version {triton_version}: give a positive integer (Triton's version folders "
                           "are numbers)")
    if model_name is not None and (not MODEL_NAME.fullmatch(model_name) or ".." in model_name):
        raise InvalidInput(f"--model-name {model_name!r}: use 1 to 128 of A-Z a-z 0-9 . _ - (a folder name)")
    store = open_store(store)
    resolved = resolve(store, ref)
    manifest = resolved.manifest
    name = model_name or manifest.content.name
    engines = _engines(manifest, precision)
    plans = _plan_files(engines)
    if default_plan is not None and default_plan not in plans:
        raise InvalidInput(f"--default-plan {default_plan}: the release has no engine for that compute capability; "
                           f"it has {', '.join(plans)}")
    config = render_config(name, manifest, engines, plans, default_plan)
    model_dir = repo / name
    target = model_dir / str(triton_version)
    files = {_file_name(e): e for e in engines if _file_name(e) in plans.values()}  # what the config names
    expected = {file: engine.plan.sha256 for file, engine in files.items()}
    result = TritonExport(release=str(resolved.ref), version=resolved.version, model=name, model_dir=str(model_dir),
                          triton_version=triton_version, status="written", plans=plans, sha256=expected, seconds=0)
    existing_config = model_dir / CONFIG
    with model_lock(repo, name):  # two exports into one model: one at a time, so a config never names the other's
        _regular_or_absent(existing_config)
        if existing_config.is_file() and _body(existing_config.read_bytes()) != _body(config.encode()):
            raise Conflict(f"{existing_config}: describes other plans, inputs or outputs than {resolved.ref}; export "
                           "to another --model-name or --repo, or remove that model folder")
        if target.exists():
            _same_or_conflict(target, expected, resolved.ref)
            result.status = "unchanged"
        else:
            created = not model_dir.exists()
            model_dir.mkdir(exist_ok=True)
            sweep_partials(model_dir)  # version folders that exports killed midway left
            try:
                _stage(store, manifest.content.name, files, target,
                       (cache_dir or default_cache_dir()) / "pulls" if use_cache else None)
            except BaseException:
                if created:  # a failed export leaves no empty model folder behind
                    with contextlib.suppress(OSError):
                        model_dir.rmdir()
                raise
        write_atomic(existing_config, config.encode())  # last: Triton sees the model only once its plans are there
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _engines(manifest: ReleaseManifest, precision: str | None) -> list[ReleaseEngine]:
    release = f"{manifest.content.name}@{manifest.content.version}"
    engines = [e for e in manifest.content.engines if precision is None or e.precision == precision]
    precisions = sorted({e.precision.value for e in manifest.content.engines})
    if not engines:
        what = f"no {precision} engine" if precision else "no engines"
        raise InvalidInput(f"{release} has {what}" + (f"; it has {', '.join(precisions)}" if precisions else ""))
    if len({e.precision for e in engines}) > 1:
        raise InvalidInput(f"{release} has engines of {', '.join(precisions)}; one Triton model serves one "
                           f"precision: add --precision {' or '.join(precisions)}")
    return engines


def _file_name(engine: ReleaseEngine) -> str:
    return f"{engine.sku}-{engine.precision.value}.plan"


def _plan_files(engines: list[ReleaseEngine]) -> dict[str, str]:
    """Compute capability -> plan file. Triton tells GPUs apart only by compute capability, so two engines of
    one (an A10 and an A40 plan, both 8.6) cannot both be served: refused, naming them."""
    plans: dict[str, str] = {}
    owner: dict[str, ReleaseEngine] = {}
    for engine in engines:
        for capability in engine.compute_capabilities:
            if capability in owner and owner[capability].plan.sha256 != engine.plan.sha256:
                raise InvalidInput(f"{owner[capability].sku} and {engine.sku} both have a {engine.precision} engine "
                                   f"for compute capability {capability}; Triton picks plans by compute capability "
                                   "only: publish one of them per compute capability")
            owner.setdefault(capability, engine)
            plans.setdefault(capability, _file_name(owner[capability]))
    return dict(sorted(plans.items(), key=lambda item: tuple(int(p) for p in item[0].split("."))))


def _body(config: bytes) -> bytes:
    """A config without its comment lines (which name the release it was written for): the next release of the
    same plans, inputs and outputs is the same model, exported as the next version."""
    return b"\n".join(line for line in config.splitlines() if not line.lstrip().startswith(b"#"))


def render_config(name: str, manifest: ReleaseManifest, engines: list[ReleaseEngine], plans: dict[str, str],
                  default_plan: str | None = None) -> str:
    """config.pbtxt: Triton's ModelConfig message (tritonclient's ``model_config_pb2``), built field by field and
    printed in protobuf text format, one field a line with comments naming the release and its profiles. The text
    is parsed back and must give the very message built, so nothing a manifest holds (a tensor name with a quote,
    a newline in a comment) can add a field."""
    model_config_pb2, text_format = _protobuf()
    content = manifest.content
    release = f"{content.name}@{content.version}"
    if not content.inputs or not content.outputs:
        raise InvalidInput(f"{release} records no model inputs and outputs (published from a build folder whose "
                           "model was not at the path build.json names); publish a new version where the model is")
    profiles = engines[0].profiles
    if any(e.profiles != profiles for e in engines):
        raise InvalidInput(f"{release}: its engines were built with different shape profiles; one Triton model "
                           "needs one profile list")
    config = model_config_pb2.ModelConfig(name=name, platform="tensorrt_plan", max_batch_size=0)
    for kind, tensors in (("input", content.inputs), ("output", content.outputs)):
        for tensor in tensors:
            _tensor(getattr(config, kind).add(), kind, tensor, release, model_config_pb2)
    for capability, file in plans.items():
        config.cc_model_filenames[capability] = file
    if default_plan is not None:
        config.default_model_filename = plans[default_plan]
    group = config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_GPU, count=1)
    group.profile.extend(str(index) for index in range(len(profiles)))

    lines = [_comment(f"{release} ({content.model_name}, sha256 {content.model_sha256[:12]}), written by compile "
                      "export triton"), f"name: {_string(config.name)}", f"platform: {_string(config.platform)}",
             f"max_batch_size: {config.max_batch_size}  # the batch dimension is explicit in dims"]
    for kind in ("input", "output"):
        for tensor in getattr(config, kind):
            dims = ", ".join(str(d) for d in tensor.dims)
            lines.append(f"{kind} [ {{ name: {_string(tensor.name)} data_type: "
                         f"{model_config_pb2.DataType.Name(tensor.data_type)} dims: [ {dims} ] }} ]")
    for capability in plans:
        lines.append(f"cc_model_filenames {{ key: {_string(capability)} value: "
                     f"{_string(config.cc_model_filenames[capability])} }}")
    if config.default_model_filename:
        lines.append(f"default_model_filename: {_string(config.default_model_filename)}")
    for index, profile in enumerate(profiles):
        shapes = "; ".join(f"{tensor} min {r.min} opt {r.opt} max {r.max}" for tensor, r in profile.shapes.items())
        lines.append(_comment(f"profile {index} ({profile.name}): {shapes}"))
    for group in config.instance_group:
        indices = ", ".join(_string(index) for index in group.profile)
        lines.append(f"instance_group [ {{ kind: {model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)} "
                     f"count: {group.count} profile: [ {indices} ] }} ]")
    text = "\n".join(lines) + "\n"
    if text_format.Parse(text, model_config_pb2.ModelConfig()) != config:  # a guard: never expected to fire
        raise InvalidInput(f"{release}: config.pbtxt would not say what its ModelConfig says; not written")
    return text


def _protobuf():
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:
        raise EnvironmentProblem(f"compile export triton writes config.pbtxt with tritonclient's ModelConfig, which "
                                 f"is not installed ({exc}); install the [triton] extra") from None
    return model_config_pb2, text_format


def _tensor(message, kind: str, tensor: TensorSignature, release: str, model_config_pb2) -> None:
    data_type = TRITON_TYPES.get(tensor.dtype)
    if data_type is None:
        raise InvalidInput(f"{release}: {kind} {tensor.name!r} is of type {tensor.dtype}, which Triton has no "
                           "type for")
    if tensor.shape is None:
        raise InvalidInput(f"{release}: {kind} {tensor.name!r} has no known rank; Triton needs its dims")
    message.name = tensor.name
    message.data_type = model_config_pb2.DataType.Value(data_type)
    message.dims.extend(d if isinstance(d, int) and d >= 0 else -1 for d in tensor.shape)


def _string(text: str) -> str:
    """A protobuf text-format string literal (quotes, backslashes and control characters escaped)."""
    from google.protobuf import text_encoding

    return f'"{text_encoding.CEscape(text, as_utf8=True)}"'


def _comment(text: str) -> str:
    """A comment line, its text kept to one line (a manifest's model or profile name could hold a newline)."""
    return "# " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _stage(store: Store, name: str, files: dict[str, ReleaseEngine], target: Path, cache: Path | None) -> None:
    """Fetch every plan verified into a hidden sibling, then rename it to ``target`` in one step."""
    staged = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.partial")
    staged.mkdir()
    try:
        for file, engine in files.items():
            fetch_verified(store, name, engine.plan.sha256, engine.plan.size_bytes, staged / file, cache)
        try:
            os.rename(staged, target)  # fails if another export put the version there meanwhile
        except OSError:
            if not target.exists():
                raise
            _same_or_conflict(target, {f: e.plan.sha256 for f, e in files.items()}, name)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _same_or_conflict(target: Path, expected: dict[str, str], ref: object) -> None:
    found = {}
    for path in sorted(target.iterdir()) if target.is_dir() else []:
        if not path.is_file() or path.is_symlink():
            found[path.name] = "not a plain file"
            continue
        with open(path, "rb") as handle:
            found[path.name] = hashlib.file_digest(handle, "sha256").hexdigest()
    if found != expected:
        raise Conflict(f"{target}: this Triton version folder holds other files than {ref}'s plans; pass another "
                       "--triton-version (a new number), or remove it")


def _regular_or_absent(path: Path) -> None:
    """config.pbtxt is replaced whole, never written through: what stands there must be a plain file (a link, a
    FIFO or a folder is someone else's, refused rather than replaced or read)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise InvalidInput(f"{path}: not a regular file (a link, FIFO or folder stands there); remove it, or export "
                           "to another --model-name")


@contextlib.contextmanager
def model_lock(repo: Path, name: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``REPO/.<model>.lock`` while an export writes that model (released when the file
    closes, also when the process dies). Opened without following a link or blocking on a FIFO that stands there
    (O_NOFOLLOW, O_NONBLOCK); anything but a regular file is refused."""
    path = repo / f".{name}.lock"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        what = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a FIFO", errno.EISDIR: "a folder"}.get(exc.errno)
        if what:
            raise InvalidInput(f"--repo {repo}: {path.name} is {what}, not the lock file exports use; remove it"
                               ) from None
        raise EnvironmentProblem(f"--repo {repo}: cannot open {path.name} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "ab") as lock:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(f"--repo {repo}: {path.name} is not a regular file, not the lock file exports use; "
                               "remove it")
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
