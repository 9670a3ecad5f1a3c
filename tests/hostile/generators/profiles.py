"""Shape profiles: random documents, hostile dims, names, structure and YAML text."""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.hostile.generators.common import (
    AMBIGUOUS,
    DIGITS_PROFILES,
    INVALID,
    MAX_PROFILE_DIM,
    MAX_PROFILE_VOLUME,
    MODEL_DIMS,
    MODEL_INPUT,
    VALID,
    Made,
    hostile_text,
    valid_profiles,
)


def profiles_verdict(data: Any) -> str:
    """The documented profile rules (docs/profiles.md), applied to the digits model's input image [B, 1, 8, 8],
    independently of the tool's own code."""
    if not isinstance(data, dict) or set(data) != {"profiles"}:
        return INVALID
    profiles = data["profiles"]
    if not isinstance(profiles, list) or not profiles:
        return INVALID
    names = []
    for profile in profiles:
        if not isinstance(profile, dict) or set(profile) != {"name", "shapes"}:
            return INVALID
        name, shapes = profile["name"], profile["shapes"]
        if not isinstance(name, str) or not name:
            return INVALID
        if not isinstance(shapes, dict) or set(shapes) != {MODEL_INPUT}:  # the one dynamic input, nothing else
            return INVALID
        shape = shapes[MODEL_INPUT]
        if not isinstance(shape, dict) or set(shape) != {"min", "opt", "max"}:
            return INVALID
        lists = [shape["min"], shape["opt"], shape["max"]]
        if not all(
            isinstance(dims, list) and len(dims) == len(MODEL_DIMS) and all(type(d) is int for d in dims)
            for dims in lists
        ):
            return INVALID
        for axis, static in enumerate(MODEL_DIMS):
            if isinstance(static, int) and any(dims[axis] != static for dims in lists):
                return INVALID
        if not 1 <= lists[0][0] <= lists[1][0] <= lists[2][0]:
            return INVALID
        if any(d > MAX_PROFILE_DIM for dims in lists for d in dims) or any(
            math.prod(dims) > MAX_PROFILE_VOLUME for dims in lists
        ):
            return INVALID
        names.append(name)
    return VALID if len(set(names)) == len(names) else INVALID


HOSTILE_DIMS = (
    2**31,
    -1,
    -(2**31),
    1,
    2,
    7,
    8,
    9,
    64,
    2**31 - 1,
    0,
    2**32 + 1,
    2**40,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    4.0,
    1.5,
    float("nan"),
    float("inf"),
    -0.0,
    True,
    False,
    None,
    "8",
    "B",
    [8],
    {"v": 8},
    1e400,
)


def yaml_values(depth: int = 3) -> st.SearchStrategy[Any]:
    """Arbitrary YAML-representable data (what a random YAML document parses to)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(HOSTILE_DIMS),
    )
    keys = st.one_of(
        st.sampled_from(["profiles", "name", "shapes", MODEL_INPUT, "min", "opt", "max", "mid"]),
        st.text(max_size=8),
        st.integers(-2, 2),
        st.booleans(),
        st.none(),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
        max_leaves=12,
    )


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=2**20)


@dataclass(frozen=True)
class ProfilesDocument:
    """A profiles file holding ``data`` as YAML, with ``edits`` applied to the valid digits profiles when
    ``data`` is None."""

    data: Any = None
    edits: tuple[tuple[str, Any], ...] | None = None
    """Edits of the valid digits profiles; None: the document is ``data`` itself."""

    def content(self) -> Any:
        if self.edits is None:
            return self.data
        data = valid_profiles()
        for edit in self.edits:
            with contextlib.suppress(KeyError, IndexError, TypeError, AttributeError):  # it edits what is gone
                data = apply_profile_edit(data, edit)
        return data

    def write(self, box) -> Made:
        text = dump_yaml(self.content())
        path = box.inputs / "profiles.yaml"
        path.write_text(text, encoding="utf-8")
        try:  # the verdict is on what a reader of the file gets back
            verdict = profiles_verdict(yaml.safe_load(text))
        except (yaml.YAMLError, ValueError):
            verdict = INVALID
        return Made(path, verdict, ("profiles.yaml",))


def apply_profile_edit(data: Any, edit: tuple[str, Any]) -> Any:
    """One edit of a profiles document, addressed by a small path language the strategies draw."""
    what, value = edit
    data = copy.deepcopy(data)
    profiles = data["profiles"]
    if what.startswith("dim:"):  # dim:<profile>:<min|opt|max>:<axis>
        _, index, key, axis = what.split(":")
        profiles[int(index)]["shapes"][MODEL_INPUT][key][int(axis)] = value
    elif what.startswith("shape:"):  # shape:<profile>:<min|opt|max> replaced whole
        _, index, key = what.split(":")
        profiles[int(index)]["shapes"][MODEL_INPUT][key] = value
    elif what.startswith("name:"):
        profiles[int(what.split(":")[1])]["name"] = value
    elif what == "same-names":
        profiles[1]["name"] = profiles[0]["name"]
    elif what == "unknown-shape-key":
        profiles[0]["shapes"][MODEL_INPUT][value] = [1, 1, 8, 8]
    elif what == "unknown-profile-key":
        profiles[0][value] = 1
    elif what == "unknown-top-key":
        data[value] = []
    elif what == "drop-shape-key":
        del profiles[0]["shapes"][MODEL_INPUT][value]
    elif what == "drop-profile-key":
        del profiles[0][value]
    elif what == "rename-input":
        profiles[0]["shapes"][value] = profiles[0]["shapes"].pop(MODEL_INPUT)
    elif what == "extra-input":
        profiles[0]["shapes"][value] = {"min": [1], "opt": [1], "max": [1]}
    elif what == "no-shapes":
        profiles[0]["shapes"] = {}
    elif what == "no-profiles":
        data["profiles"] = []
    elif what == "profiles-value":
        data["profiles"] = value
    elif what == "top-level":
        return value
    elif what == "batch":  # min/opt/max of the batch dim of profile 0 at once
        for key, dim in zip(("min", "opt", "max"), value, strict=True):
            profiles[0]["shapes"][MODEL_INPUT][key][0] = dim
    else:
        raise AssertionError(what)
    return data


def _dim_edits() -> st.SearchStrategy[tuple[str, Any]]:
    place = st.tuples(st.integers(0, 1), st.sampled_from(["min", "opt", "max"]), st.integers(0, 3))
    return st.one_of(
        st.builds(lambda p, v: (f"dim:{p[0]}:{p[1]}:{p[2]}", v), place, st.sampled_from(HOSTILE_DIMS)),
        st.builds(lambda p, v: (f"dim:{p[0]}:{p[1]}:{p[2]}", v), place, st.integers()),
        st.tuples(st.just("batch"), st.tuples(*[st.sampled_from((0, 1, 2, 64, 2**31 - 1, 2**31, 2**62))] * 3)),
        st.builds(
            lambda i, k, v: (f"shape:{i}:{k}", v),
            st.integers(0, 1),
            st.sampled_from(["min", "opt", "max"]),
            st.one_of(st.lists(st.sampled_from(HOSTILE_DIMS), max_size=6), yaml_values()),
        ),
    )


def _name_edits() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.builds(lambda i, v: (f"name:{i}", v), st.integers(0, 1), hostile_text()),
        st.builds(lambda i, v: (f"name:{i}", v), st.integers(0, 1), st.sampled_from([None, 5, 1.5, True, [], {}])),
        st.just(("same-names", None)),
        st.tuples(st.just("rename-input"), hostile_text()),
        st.tuples(st.just("extra-input"), hostile_text()),
    )


def _structure_edits() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("unknown-shape-key"), st.sampled_from(["mid", "MIN", "min "])),
        st.tuples(st.just("unknown-profile-key"), st.sampled_from(["shape", "inputs", "Name"])),
        st.tuples(st.just("unknown-top-key"), st.sampled_from(["profile", "skus", "version"])),
        st.tuples(st.just("drop-shape-key"), st.sampled_from(["min", "opt", "max"])),
        st.tuples(st.just("drop-profile-key"), st.sampled_from(["name", "shapes"])),
        st.just(("no-shapes", None)),
        st.just(("no-profiles", None)),
        st.tuples(st.just("profiles-value"), yaml_values()),
        st.tuples(st.just("top-level"), yaml_values()),
    )


@dataclass(frozen=True)
class ProfilesText:
    """A profiles file whose *text* is hostile: what no data structure dumps (duplicate keys, Python tags,
    nesting beyond any parser's stack, > 16 MiB, bytes that are not UTF-8, alias bombs, several documents)."""

    kind: str
    size: int

    def write(self, box) -> Made:
        text = DIGITS_PROFILES.read_bytes()
        path = box.inputs / "profiles.yaml"
        verdict = INVALID
        if self.kind == "duplicate-key":
            data = text.replace(b"    shapes:", b"    shapes: {}\n    shapes:", 1)
        elif self.kind == "duplicate-input":
            data = text.replace(
                b"      image:",
                b"      image: {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [1, 1, 8, 8]}\n      image:",
                1,
            )
        elif self.kind == "python-tag":
            data = b"profiles: !!python/object/apply:os.system ['touch " + str(box.outside / "PWNED").encode() + b"']\n"
        elif self.kind == "python-name":
            data = b"profiles:\n  - name: !!python/name:os.system\n    shapes: {}\n"
        elif self.kind == "flow-nesting":
            depth = 1000 + self.size % 200_000
            data = b"profiles: " + b"[" * depth + b"]" * depth + b"\n"
        elif self.kind == "block-nesting":  # "- - - - x": block sequences nested on one line
            depth = 500 + self.size % 100_000
            data = b"profiles:\n" + b"- " * depth + b"x\n"
        elif self.kind == "giant":
            data = text + b"#" * ((16 << 20) + 1 + self.size % 4096) + b"\n"
        elif self.kind == "giant-line":
            data = b"profiles: [" + b"1, " * ((1 << 20) + self.size % 4096) + b"1]\n"
        elif self.kind == "not-utf8":
            data = text.replace(b"online", b"onl\xffine", 1)
        elif self.kind == "utf16":  # YAML allows UTF-16 with a BOM; refusing anything but UTF-8 is within bounds
            data, verdict = text.decode().encode("utf-16"), AMBIGUOUS
        elif self.kind == "alias-bomb":
            lines = [b"a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
            lines += [b"a%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * 10) + b"]" for i in range(1, 25)]
            lines.append(b"profiles: [{name: x, shapes: {image: {min: *a24, opt: *a24, max: *a24}}}]")
            data = b"\n".join(lines) + b"\n"
        elif self.kind == "merge-bomb":
            data = (
                b"base: &b {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [8, 1, 8, 8]}\n"
                b"profiles:\n  - name: m\n    shapes:\n      image: {<<: *b, <<: *b}\n"
            )
        elif self.kind == "two-documents":
            data = text + b"\n---\n" + text
        elif self.kind == "nul-bytes":
            data = text.replace(b"online", b"on\0line", 1)
        elif self.kind == "tabs":
            data = text.replace(b"  - name", b"\t- name", 1)
        elif self.kind == "crlf":  # Windows line endings: still the valid file
            data, verdict = text.replace(b"\n", b"\r\n"), VALID
        elif self.kind == "bom":  # a UTF-8 byte order mark: YAML allows one; refusing it cleanly is within bounds
            data, verdict = b"\xef\xbb\xbf" + text, AMBIGUOUS
        elif self.kind == "empty":
            data = b""
        elif self.kind == "only-comments":
            data = b"# nothing here\n" * (1 + self.size % 100)
        elif self.kind == "huge-int-literal":
            data = text.replace(b"max: [64,", b"max: [" + b"9" * (1000 + self.size % 100_000) + b",", 1)
        elif self.kind == "directory":
            path.mkdir()
            return Made(path, INVALID, ("profiles.yaml",))
        elif self.kind == "missing":
            return Made(path, INVALID, ("profiles.yaml",))
        elif self.kind == "dev-zero":
            path.symlink_to("/dev/zero")
            return Made(path, INVALID, ("profiles.yaml",))
        else:
            raise AssertionError(self.kind)
        path.write_bytes(data)
        return Made(path, verdict, ("profiles.yaml",))


PROFILE_TEXT_KINDS = (
    "duplicate-key",
    "duplicate-input",
    "python-tag",
    "python-name",
    "flow-nesting",
    "block-nesting",
    "giant",
    "giant-line",
    "not-utf8",
    "utf16",
    "alias-bomb",
    "merge-bomb",
    "two-documents",
    "nul-bytes",
    "tabs",
    "crlf",
    "bom",
    "empty",
    "only-comments",
    "huge-int-literal",
    "directory",
    "missing",
    "dev-zero",
)


def profile_recipes(kind: str) -> st.SearchStrategy[Any]:
    def edits(strategy):
        return st.builds(ProfilesDocument, st.none(), st.lists(strategy, min_size=1, max_size=3).map(tuple))

    def document(data):
        return st.builds(ProfilesDocument, data, st.none())

    return {
        "random-document": document(yaml_values()),
        "random-under-profiles": document(st.builds(lambda v: {"profiles": v}, yaml_values())),
        "dims": edits(_dim_edits()),
        "names": edits(_name_edits()),
        "structure": edits(_structure_edits()),
        "text": st.builds(ProfilesText, st.sampled_from(PROFILE_TEXT_KINDS), st.integers(0, 2**20)),
    }[kind]


PROFILE_KINDS = ("random-document", "random-under-profiles", "dims", "names", "structure", "text")
