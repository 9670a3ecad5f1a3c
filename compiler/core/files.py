"""Files that readers never see half-written: atomic writes, staging folders swapped into place, output folders
proven writable before work is spent, and the digests and stats that tell whether a file changed."""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

from compiler.core.errors import InvalidInput, stop_signals_held


def default_cache_dir() -> Path:
    """Where compile keeps what it can make again (engines, prepared models, timing caches)."""
    return Path(os.environ.get("COMPILE_CACHE_DIR") or Path.home() / ".cache" / "compile")


def hash_json(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def stat_key(path: Path) -> list[Any]:
    """What changes whenever a file's content may have (a write always moves ctime)."""
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]


def content_stat(path: Path) -> list[Any]:
    """What a write to a file moves, without ctime: every hard link made to the file or removed from it
    moves ctime too, and cached plans gain and lose hard links on every hit."""
    return stat_key(path)[:-1]


def changed_since(stats: list[tuple[str, list[Any]]]) -> list[str]:
    """The files among (path, :func:`stat_key`) pairs that changed or vanished since."""
    changed = []
    for path, before in stats:
        try:
            if stat_key(Path(path)) != before:
                changed.append(path)
        except OSError:
            changed.append(path)
    return changed


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def writable_folder(path: Path, role: str) -> Path:
    """Create ``path`` (and its parents) and prove a file can be made in it, before any work is spent
    on what would be written there; InvalidInput names ``role`` (the option that chose the folder)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror or exc
        raise InvalidInput(f"{role} {path}: cannot write there ({reason}); choose another folder") from None
    return path


def check_writable_folder(path: Path, role: str) -> None:
    """What :func:`writable_folder` would refuse, found without making anything: for checks before costly work
    (a calibration) in a run that makes its folders only once every other check has passed."""
    existing = path
    while not existing.exists() and existing.parent != existing:  # exists() is False under a file, too
        existing = existing.parent
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return
    if not existing.is_dir():
        reason = "a file is in the way" if existing == path else f"{os.strerror(errno.ENOTDIR)}: {existing}"
    else:
        reason = f"{os.strerror(errno.EACCES)}: {existing}"
    raise InvalidInput(f"{role} {path}: cannot write there ({reason}); choose another folder")


def new_folder(parent: Path, prefix: str) -> Path:
    """A new, uniquely named folder in ``parent``, made like any other folder (the umask decides who may read
    it, where tempfile.mkdtemp makes it owner-only): staging folders are renamed into place as results that
    serving fleets, CI steps and teammates sharing a cache read."""
    folder = parent / f"{prefix}{os.urandom(6).hex()}"
    folder.mkdir()
    return folder


ABANDONED_AFTER_SECONDS = 60
"""A staging folder nobody holds is swept only once this old: the run that made it locks it a moment later."""


@contextmanager
def staging_folder(parent: Path, name: str) -> Iterator[Path]:
    """A new folder ``.NAME-<12 hex>`` in ``parent`` in which to make ``NAME``, removed on the way out unless it
    was renamed into place meanwhile.

    It is flock-ed while in use, so a later run tells the staging folders of runs that died (SIGKILL, the OOM
    killer: the kernel drops their locks) from those of runs still working, and sweeps the former first; a
    killed build would otherwise leave its half-written plan (GBs for large models) there for good.
    """
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned(parent, name)
    with ExitStack() as cleanup:
        with stop_signals_held():
            folder = new_folder(parent, f".{name}-")
            cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
            handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            cleanup.callback(os.close, handle)
        with suppress(OSError):  # a filesystem without locks: it is simply never swept
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield folder


def _sweep_abandoned(parent: Path, name: str) -> None:
    staging_name = re.compile(rf"\.{re.escape(name)}-[0-9a-f]{{12}}")
    try:
        candidates = [p for p in parent.iterdir() if staging_name.fullmatch(p.name)]
    except OSError:
        return
    for candidate in candidates:
        try:
            handle = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(handle).st_mtime >= ABANDONED_AFTER_SECONDS:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while its run is alive
                shutil.rmtree(candidate, ignore_errors=True)
        except OSError:
            pass
        finally:
            os.close(handle)


def replace_dir(target: Path, staging: Path) -> None:
    """Put the finished staging folder in ``target``'s place: readers see the previous folder or the new one,
    whole, never none. Where the filesystem can swap two paths atomically (Linux's RENAME_EXCHANGE), concurrent
    runs finishing the same target each swap theirs in and the last one stays; elsewhere the previous folder is
    renamed aside first and put back when the new one cannot go in place."""
    while True:
        try:
            os.rename(staging, target)  # no folder there yet
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            _exchange(staging, target)
        except FileNotFoundError:  # a concurrent run moved the target away meanwhile: start over
            continue
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):  # not merely a filesystem without the swap
                raise
            _replace_aside(target, staging)
            return
        shutil.rmtree(staging, ignore_errors=True)  # the previous folder, swapped out
        return


def _exchange(first: Path, second: Path) -> None:
    """Swap two paths in one step (renameat2 with RENAME_EXCHANGE); ENOSYS where the C library lacks it."""
    import ctypes

    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(second))


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _replace_aside(target: Path, staging: Path) -> None:
    """Two renames, for filesystems that cannot swap: the previous folder goes aside (named like a staging
    folder, so a run that dies meanwhile leaves something the next run sweeps) and comes back on failure."""
    aside = new_folder(target.parent, f".{target.name}-")
    os.rename(target, aside / target.name)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(aside / target.name, target)
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary sibling and rename: readers see the old file or the whole new one, with the
    permissions any new file gets here (see :func:`new_folder`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.urandom(6).hex()}")
    # Small files: a stop signal waits the milliseconds until the file is whole or gone (see stop_signals_held)
    with stop_signals_held():
        try:
            with open(temporary, "xb") as handle:  # O_EXCL; mode 0o666 less the umask
                handle.write(data)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def copy_file(source: Path, target: Path) -> None:
    """An independent copy of ``source`` at ``target`` (created, must not exist): a reflink where the filesystem
    shares extents copy-on-write (btrfs, XFS), else a byte copy; never a hard link, so editing one cannot change
    the other."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), 0x40049409, src.fileno())  # FICLONE
        except OSError:
            shutil.copyfileobj(src, dst, 1 << 20)


STALE_PARTIAL_SECONDS = 3600
"""A write in progress touches its temporary file at every chunk; one untouched for an hour was left by a writer
that was killed (``kill -9``, a power cut) and can no longer clean up after itself."""


def sweep_partials(folder: Path, prefix: str = ".") -> None:
    """Remove the ``<prefix>….partial`` files and folders in ``folder`` that interrupted writes left (untouched
    for :data:`STALE_PARTIAL_SECONDS`); best effort, never following a link."""
    cutoff = time.time() - STALE_PARTIAL_SECONDS
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".partial")):
            continue
        with suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)


class NotRegularFile(OSError):
    """Something other than a regular file stands where one belongs; ``what`` says what ("a symbolic link", "a FIFO",
    "a folder", or "not a regular file")."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.what = what


_NOT_REGULAR = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a FIFO", errno.EISDIR: "a folder"}


def _regular(fd: int, path: Path) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFile(path, "not a regular file")
    return fd


def open_lock_file(path: Path) -> BinaryIO:
    """``path`` opened (created) to ``flock``: a link standing there is never followed (O_NOFOLLOW) and a FIFO never
    blocks the opener (O_NONBLOCK); either, a folder or anything but a regular file raises :class:`NotRegularFile`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in _NOT_REGULAR:
            raise NotRegularFile(path, _NOT_REGULAR[exc.errno]) from None
        raise
    return os.fdopen(_regular(fd, path), "ab")


def read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``path`` (so a caller can tell a file over ``limit``), opened
    without blocking: a FIFO, device or folder put where a file belongs raises :class:`NotRegularFile`."""
    with os.fdopen(_regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK), path), "rb") as handle:
        return handle.read(limit + 1)
