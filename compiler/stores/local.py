"""A store in a local folder (the default, ``./artifacts``): the shared layout on the filesystem.

Blobs and manifests are written to a temporary sibling and hard-linked to their name, which fails when the name
exists: an exclusive create that is never half-written and never replaces a blob or manifest already there. A
channel moves under an ``flock`` (its lock file opened without following links) only if it still has the content
its mover read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.files import NotRegularFile, open_lock_file, sweep_partials
from compiler.core.record_files import MAX_RECORD_BYTES
from compiler.stores.base import Sink, Token, VerifyingReader
from compiler.stores.keyed import KeyedStore

CHUNK = 1 << 20


class LocalStore(KeyedStore):
    def __init__(self, root: Path, *, create: bool = False) -> None:
        self.root = root
        self.uri = str(root)
        self._swept: set[Path] = set()
        self._hidden: dict[str, str] = {}
        if create:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise EnvironmentProblem(f"store {root}: cannot create it ({exc.strerror or exc})") from None
            sweep_partials(root / "blobs" / "sha256")  # a publisher's: what killed ones left where blobs go
        if not root.is_dir():
            what = "is not a folder" if root.exists() else "does not exist (nothing was published there)"
            raise EnvironmentProblem(f"store {root} {what}; give --store the folder you publish to")

    def _path(self, key: str) -> Path:
        """A key's file, refused if a link in the store (``releases/x`` pointing elsewhere) leads out of it."""
        path = self.root.joinpath(*key.split("/"))  # keys are built from checked names only
        if not path.resolve().is_relative_to(self.root.resolve()):
            raise InvalidInput(
                f"store {self.root}: {key} leads out of the store through a symbolic link; "
                "a store holds plain files and folders only"
            )
        return path

    def _temporary(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent not in self._swept:  # once per folder: what killed writers left there
            self._swept.add(path.parent)
            sweep_partials(path.parent)
        return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.partial")

    def _size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            return path.stat().st_size if path.is_file() and not path.is_symlink() else None
        except OSError:
            return None

    def _put(self, key: str, source: VerifyingReader) -> bool:
        path = self._path(key)
        temporary = self._temporary(path)
        try:
            with open(temporary, "xb") as handle:
                while data := source.read(CHUNK):
                    handle.write(data)
                source.require_verified()
                handle.flush()
                os.fsync(handle.fileno())
            temporary.chmod(0o444)  # a blob is its digest: nobody edits it in place
            try:
                os.link(temporary, path)  # create-only: never replaces what is there under the name
            except FileExistsError:
                return False
            return True
        finally:
            temporary.unlink(missing_ok=True)

    def _remove_damaged(self, key: str, sha256: str, size: int) -> bool:
        """Renamed aside in one step (the name is then free for a create-only write), then judged: a damaged
        file is removed; a good one (a racing repair's) is linked back unless another good one took the name."""
        path = self._path(key)
        aside = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.damaged.partial")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        try:
            if _holds(aside, sha256, size):
                with contextlib.suppress(FileExistsError):
                    os.link(aside, path)
                return False
            return True
        finally:
            if aside.is_dir() and not aside.is_symlink():
                shutil.rmtree(aside, ignore_errors=True)
            else:
                aside.unlink(missing_ok=True)

    def _open(self, key: str) -> BinaryIO | None:
        """A key's file for reading, None when there is none. What else stands there (a link, a FIFO, a folder)
        is damage: refused without following or blocking on it."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._damaged(key, "a symbolic link") from None
            raise EnvironmentProblem(f"store {self.root}: cannot read {key} ({exc.strerror or exc})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO (opened without blocking), a folder
            os.close(fd)
            raise self._damaged(key, "not a regular file")
        return os.fdopen(fd, "rb")

    def _damaged(self, key: str, what: str) -> CheckFailed:
        return CheckFailed(
            f"store {self.root}: {key} is damaged ({what}; a store holds plain files and folders "
            "only); publish it again or ask who owns the store"
        )

    def _stream(self, key: str, sink: Sink, size: int | None = None) -> bool:
        handle = self._open(key)
        if handle is None:
            return False
        left = None if size is None else size + 1  # one byte past the expected size is enough to tell
        with handle:
            while left is None or left > 0:
                data = handle.read(CHUNK if left is None else min(CHUNK, left))
                if not data:
                    break
                if left is not None:
                    left -= len(data)
                sink.write(data)
        return True

    def _read(self, key: str) -> tuple[bytes, Token] | None:
        handle = self._open(key)
        if handle is None:
            return None
        with handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
        return data, hashlib.sha256(data).hexdigest()

    def _create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        temporary = self._temporary(path)
        try:
            with open(temporary, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            temporary.chmod(0o444)
            os.link(temporary, path)  # fails if the name exists: an exclusive create of a whole file
            return True
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)

    def _swap(self, key: str, data: bytes, expected: Token | None) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock(key, path.with_name(f".{path.name}.lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
            current = self._read(key)
            if (current[1] if current else None) != expected:
                return False
            temporary = self._temporary(path)
            try:
                temporary.write_bytes(data)
                os.replace(temporary, path)
            finally:
                temporary.unlink(missing_ok=True)
        return True

    def _lock(self, key: str, path: Path) -> BinaryIO:
        """A channel's lock file, opened (created) in the store itself: a link standing there is never followed
        (O_NOFOLLOW) and a FIFO never blocks the opener (O_NONBLOCK); either, or anything but a regular file, is
        damaged store content."""
        lock_key = f"{key.rpartition('/')[0]}/{path.name}"
        try:
            return open_lock_file(path)
        except NotRegularFile as exc:
            plain = exc.what in ("a symbolic link", "not a regular file")
            raise self._damaged(lock_key, exc.what if plain else f"{exc.what}, not a regular file") from None
        except OSError as exc:
            raise EnvironmentProblem(f"store {self.root}: cannot open {lock_key} ({exc.strerror or exc})") from None

    def names(self) -> list[str]:
        return [name for name in super().names() if self.versions(name)]

    def versions(self, name: str) -> list[str]:
        """Only folders with a manifest: a publisher killed before writing its manifest leaves a folder here (on S3,
        where the manifest is the only object under ``releases/``, it leaves nothing)."""
        folder = self.root / "releases" / name
        return [version for version in super().versions(name) if os.path.lexists(folder / version / "manifest.json")]

    def _children(self, prefix: str) -> list[str]:
        """Plain files and folders only: what else stands there (a link, a FIFO) is never followed, and is
        remembered (:meth:`hidden`) so gc can refuse a store whose listings hide something."""
        try:
            names = []
            for entry in os.scandir(self._path(prefix.rstrip("/"))):
                if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
                else:
                    what = "a symbolic link" if entry.is_symlink() else "not a regular file"
                    self._hidden[prefix + entry.name] = what
            return names
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return []
            raise EnvironmentProblem(f"store {self.root}: cannot list {prefix} ({exc.strerror or exc})") from None

    def hidden(self) -> list[str]:
        return [f"{key} ({what})" for key, what in sorted(self._hidden.items())]

    def _delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise EnvironmentProblem(f"store {self.root}: cannot remove {key} ({exc.strerror or exc})") from None
        with contextlib.suppress(OSError):  # a version's folder, emptied (another file there keeps it)
            path.parent.rmdir()

    def _listing(self, prefix: str) -> dict[str, tuple[int, float]]:
        found = {}
        for name in self._children(prefix):
            with contextlib.suppress(OSError):  # removed meanwhile
                facts = os.lstat(self._path(prefix + name))
                if stat.S_ISREG(facts.st_mode):
                    found[name] = (facts.st_size, facts.st_mtime)
        return found


def _holds(path: Path, sha256: str, size: int) -> bool:
    """Whether ``path`` is a regular file of ``size`` bytes hashing to ``sha256`` (not following a link, not
    blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstat(fd).st_size != size:
            return False
        return hashlib.file_digest(handle, "sha256").hexdigest() == sha256
