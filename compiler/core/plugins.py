"""The plug-ins, each describing itself once: the store kinds (by URI scheme) and the build backends (TensorRT
editions). Every URI parser, help string, error message, runtime rule, proof build, CI plan and exporter reads these
registries, so a new store or backend is one entry here and its module (docs/architecture.md, "Where new things
go"). Plain data naming modules by path: reading it imports no plug-in, no TensorRT and no pydantic."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StoreKind:
    """A store backend, chosen by the prefix of its URI (the folder store takes what has none)."""

    name: str
    prefixes: tuple[str, ...]
    module: str
    cls: str
    form: str
    """How help and errors show its URI."""
    note: str = ""
    """What help adds after the forms (another spelling of the scheme)."""
    local: bool = False
    """A folder on this machine (staging for sharded releases, cache and store in one place)."""
    extra: str | None = None
    """The pip extra that installs its client; None when the core dependencies do."""
    credentials: str = ""
    """Where its credentials go (never in the URI, where logs would show them)."""


STORES = (
    StoreKind("folder", ("file://",), "compiler.stores.local", "LocalStore", "a folder", local=True),
    StoreKind(
        "s3",
        ("s3://",),
        "compiler.stores.s3",
        "S3Store",
        "s3://BUCKET/PREFIX",
        credentials="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (docs/store.md)",
    ),
    StoreKind(
        "oci",
        ("oci://", "oci+http://"),
        "compiler.stores.oci",
        "OciStore",
        "oci://HOST/REPOSITORY",
        note="oci+http:// for a plain-HTTP registry",
        credentials="log in with `docker login HOST` or set DOCKER_CONFIG",
    ),
)


def store_kind(uri: str) -> StoreKind:
    """The kind of store a URI names: the one whose prefix it starts with, else the folder store."""
    return next((k for k in STORES if uri.startswith(k.prefixes)), STORES[0])


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(/*)(.*)", re.DOTALL)


def scheme_mistake(uri: str) -> str | None:
    """What is wrong with a URI that names a store's scheme but misspells its separator (``s3:/bucket``,
    ``OCI://host/repo``), or names an unknown scheme before a slash (``gs:/bucket``); None for a well-formed URI
    or a folder path. Taken as folders, these published into ``./s3:/bucket`` and exited 0."""
    match = _SCHEME.fullmatch(uri)
    if match is None:
        return None
    scheme, slashes, rest = match.groups()
    known = {prefix.removesuffix("://") for kind in STORES for prefix in kind.prefixes}
    if scheme.lower() not in known:
        return None if slashes.startswith("//") or not slashes else "unknown scheme"
    if slashes.startswith("//"):
        if scheme in known:
            return None
        tail = uri[len(scheme) + 3 :]
    else:
        tail = slashes + rest if scheme.lower() == "file" else rest
    return f"did you mean {scheme.lower()}://{tail}"


def store_forms() -> str:
    """``a folder, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY``: every kind, as help and errors name them."""
    return spoken_list([kind.form for kind in STORES])


def spoken_list(items: list[str]) -> str:
    """``a, b or c``: choices as help and errors say them."""
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else "".join(items)


def store_notes() -> str:
    return "; ".join(kind.note for kind in STORES if kind.note)


@dataclass(frozen=True)
class BackendKind:
    """A build backend: a TensorRT edition, the runtime family of the plans it writes."""

    name: str
    title: str
    """What people call it (errors, tables)."""
    module: str
    cls: str
    package: str
    """Its TensorRT Python module; the distribution is the same name with dashes."""
    extra: str
    """The pip extra that installs it: ``pip install 'trt-compile[EXTRA]'``."""
    plan_magic: str | None
    """A plan's first four bytes, where the header is known (None: not read)."""
    needs_target_gpu: bool
    """Builds only on a GPU of the target SKU (CI runs it on that SKU's runner)."""

    @property
    def distribution(self) -> str:
        return self.package.replace("_", "-")


BACKENDS = (
    BackendKind(
        "tensorrt-rtx",
        "TensorRT-RTX",
        "compiler.backends.tensorrt_rtx",
        "TensorRTRTXBackend",
        "tensorrt_rtx",
        "rtx",
        plan_magic="vtrt",
        needs_target_gpu=False,
    ),
    BackendKind(
        "tensorrt",
        "datacenter TensorRT",
        "compiler.backends.tensorrt",
        "DatacenterTensorRTBackend",
        "tensorrt",
        "tensorrt",
        plan_magic=None,
        needs_target_gpu=True,
    ),
)
"""In the order --version and doctor list them. Where a SKU does not name one, a build takes datacenter TensorRT if
it is installed (it needs the SKU's GPU, and a host that has it means it), else TensorRT-RTX; a proof build, which
must run here, prefers the backends that need no GPU (:func:`preferred`)."""
TRITON_RUNTIME = "tensorrt"
"""The family Triton's TensorRT backend loads (libnvinfer): no other family's plans go to a Triton repository."""
RTX_RUNTIME = "tensorrt-rtx"
"""The family an application embedding the TensorRT-RTX runtime loads (compile export rtx)."""


def backend_kind(name: str) -> BackendKind | None:
    return next((kind for kind in BACKENDS if kind.name == name), None)


def backend_names() -> tuple[str, ...]:
    return tuple(kind.name for kind in BACKENDS)


def preferred(*, gpu: bool) -> tuple[BackendKind, ...]:
    """The backends in the order to try: those that need the target's GPU first when ``gpu`` (a build on a GPU
    host), last otherwise (a proof build that must run on any machine)."""
    return tuple(sorted(BACKENDS, key=lambda kind: kind.needs_target_gpu != gpu))


BUILD_MODULES = frozenset({"onnx", "onnxruntime", "onnx_graphsurgeon", "polygraphy", "PIL"})
"""What inspecting, calibrating, building, checking and ``export rtx`` (its EP-context model) import and a slim
install (pull, verify, ls, promote, yank, gc, export triton) lacks: the ``[build]`` extra, which ``[rtx]`` and
``[tensorrt]`` include."""


def missing_build_module(name: str | None) -> str | None:
    """The error line for a command that needs a module of the ``[build]`` extra this install lacks, else None."""
    top = (name or "").split(".")[0]
    if top not in BUILD_MODULES:
        return None
    return (
        f"this command needs {top}, which this install lacks (a slim `pip install trt-compile` pulls, verifies "
        "and lists releases and exports them for Triton); pip install 'trt-compile[rtx]' to build with TensorRT-RTX, "
        "'trt-compile[tensorrt]' with datacenter TensorRT, or 'trt-compile[build]' for the rest"
    )
