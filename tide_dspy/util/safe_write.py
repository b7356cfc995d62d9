"""The one way tide-dspy writes a file: never through a symbolic link, never half-written.

A whole file is written to a temporary file in the same folder (opened with O_CREAT|O_EXCL|O_NOFOLLOW), flushed to
disk and renamed over the target with os.replace, so a crash or a full disk leaves the earlier file as it was. A
row is appended with O_APPEND|O_NOFOLLOW. The folder is opened once with O_NOFOLLOW and every name is resolved
inside it (dir_fd), so a link planted in a checkout (`tide-report -> ~`, `report.md -> ~/.bashrc`) is refused,
never written through. Folders that do not exist yet are created; an existing target folder may not be a link.

`OutLock` keeps two runs out of one output folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
LOCK_NAME = ".tide.lock"


class UnsafeOutput(ValueError):
    """A file or folder cannot be written safely (a link, not a folder, a full disk); the message says which
    and what to do."""


def _refuse(path: Path, what: str, fix: str = "remove the link, or choose another output folder") -> UnsafeOutput:
    return UnsafeOutput(f"{path}: {what}; refusing to write through it ({fix})")


def ensure_folder(folder: str | Path) -> Path:
    """`folder`, created with any missing parents. The folder itself may not be a symbolic link or a non-folder;
    each folder created here is checked to be a real folder (not a link swapped in meanwhile)."""
    folder = Path(folder)
    missing: list[Path] = []
    probe = folder
    while True:
        try:
            st = os.lstat(probe)
            break
        except FileNotFoundError:
            missing.append(probe)
            if probe.parent == probe:
                raise
            probe = probe.parent
    if not missing:
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(folder, "the output folder is a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeOutput(f"{folder}: not a folder; choose a folder as the output")
        return folder
    if not probe.is_dir():
        raise UnsafeOutput(f"{folder}: its parent {probe} is not a folder; choose another output folder")
    for part in reversed(missing):
        try:
            os.mkdir(part)
        except FileExistsError:
            pass
        st = os.lstat(part)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise _refuse(part, "appeared as a link or a file while it was being created")
    return folder


@contextmanager
def _folder_fd(folder: Path) -> Iterator[int]:
    ensure_folder(folder)
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(folder, "the output folder is a symbolic link") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _check_target(dir_fd: int, path: Path) -> None:
    """The target may be missing or a regular file; a link, a folder or a device is refused."""
    try:
        st = os.lstat(path.name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_error(path: Path, exc: OSError, kept: str) -> UnsafeOutput:
    """One line for a failed write: a full disk says so; any other error (read-only, no permission) names it."""
    if exc.errno in _NO_SPACE:
        return UnsafeOutput(f"{path}: no space left on the device ({os.strerror(exc.errno)}); {kept}. Free some "
                            "space and run again")
    return UnsafeOutput(f"{path}: cannot be written ({exc.strerror or exc}); {kept}")


def check_writable(folder: str | Path, names: tuple[str, ...]) -> Path:
    """`folder` created, and each of `names` in it missing or a regular file: the refusals `write_bytes` would
    make at the end of a run, made before it starts."""
    folder = Path(folder)
    with _folder_fd(folder) as dir_fd:
        for name in names:
            _check_target(dir_fd, folder / name)
    return folder


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace `path` with `data`: a temporary file beside it, fsync, os.replace. The earlier file stays intact
    until the new one is complete; a link at `path` or at its folder is refused (UnsafeOutput)."""
    path = Path(path)
    with _folder_fd(path.parent) as dir_fd:
        _check_target(dir_fd, path)
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, _NEW_FILE_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with _ignore_missing():
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError):
                raise _write_error(path, exc, "the earlier file, if any, was left as it was") from None
            raise
        with _ignore_missing(OSError):
            os.fsync(dir_fd)  # the rename itself survives a crash
    return path


def write_text(path: str | Path, text: str) -> Path:
    """`text` as UTF-8 through `write_bytes`."""
    return write_bytes(path, text.encode("utf-8"))


def append_text(path: str | Path, text: str) -> Path:
    """Append `text` (one or more whole lines) to `path`, created when missing, opened with O_APPEND|O_NOFOLLOW
    and flushed to disk before returning."""
    path = Path(path)
    with _folder_fd(path.parent) as dir_fd:
        _check_target(dir_fd, path)
        try:
            fd = os.open(path.name, _APPEND_FLAGS, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse(path, "is a symbolic link") from None
            raise
        try:
            _write_all(fd, text.encode("utf-8"))
            os.fsync(fd)
        except OSError as exc:
            raise _write_error(path, exc, "the rows before this one are intact (--resume continues)") from None
        finally:
            os.close(fd)
    return path


def open_existing(path: str | Path, flags: int = os.O_RDWR) -> int:
    """A descriptor of an existing regular file, opened without following a link (for in-place repairs)."""
    path = Path(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "is a symbolic link") from None
        raise


@contextmanager
def _ignore_missing(*errors: type[BaseException]) -> Iterator[None]:
    try:
        yield
    except (FileNotFoundError, *errors):
        pass


def is_inside(path: str | Path, tree: str | Path) -> bool:
    """True when `path` lies in `tree` (or is it), by its absolute spelling or by where its links lead."""
    tree_abs, tree_real = Path(os.path.abspath(tree)), Path(tree).resolve()
    path_abs, path_real = Path(os.path.abspath(path)), Path(path).resolve()
    return any(p == t or t in p.parents for p in (path_abs, path_real) for t in (tree_abs, tree_real))


def refuse_inside(out: str | Path, tree: str | Path, *, option: str = "--out", allow: str = "--out-inside") -> None:
    """Refuse an output folder inside the tree being read: the tree may ship files or links at its paths."""
    if is_inside(out, tree):
        raise UnsafeOutput(f"{option} {out} lies inside {Path(tree).resolve()}, the tree being read, which could ship "
                           "files or links "
                           f"there; pass {option} a folder outside it (e.g. {option} ../{Path(tree).resolve().name}"
                           f"-report), or {allow} to write there anyway")


class OutLock:
    """An exclusive lock on an output folder (fcntl.flock on its `.tide.lock`, which holds the holder's pid):
    a second run into the same folder is refused while the first holds it. On entry the folder is created and
    each of `names` checked (check_writable), so a refusal comes before any work. Released on exit, or when the
    process ends; a folder this lock created and the run left empty is removed again."""

    def __init__(self, folder: str | Path, names: tuple[str, ...] = ()):
        self.folder = Path(folder)
        self.names = names
        self.fd: int | None = None
        self.created = False

    def __enter__(self) -> OutLock:
        self.created = not os.path.lexists(self.folder)
        check_writable(self.folder, self.names)
        path = self.folder / LOCK_NAME
        with _folder_fd(self.folder) as dir_fd:
            _check_target(dir_fd, path)
            fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise UnsafeOutput(f"{self.folder} is in use by another tide run (pid {holder}); wait for it to finish, "
                               "or pass another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        if self.created and os.listdir(self.folder) == [LOCK_NAME]:
            with _ignore_missing(OSError):
                os.unlink(self.folder / LOCK_NAME)
                os.rmdir(self.folder)
        os.close(self.fd)  # closing the descriptor releases the flock
        self.fd = None


def remove_tree(path: str | Path) -> None:
    """Remove `path` and everything below it, however deep, never following a link: each folder is opened by name
    inside its parent's descriptor with O_NOFOLLOW and emptied, walking down and back up with one descriptor open
    at a time (no recursion, no full paths, so a chain thousands of folders deep is no harder than a flat one).
    A folder whose permissions were taken away is given them back first. A missing `path` is no error."""
    path = Path(path)
    try:
        top = os.open(path.parent, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    names: list[str] = []  # the folders walked into, below `path`
    fd = _enter(top, path.name)
    os.close(top)
    if fd is None:  # not a folder: a file or a link
        with _ignore_missing():
            os.unlink(path)
        return
    while True:
        child = None
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    child = entry.name
                    break
                with _ignore_missing():
                    os.unlink(entry.name, dir_fd=fd)
        if child is not None:
            inner = _enter(fd, child)
            if inner is not None:
                os.close(fd)
                fd, names = inner, [*names, child]
            continue
        if not names:
            os.close(fd)
            with _ignore_missing():
                os.rmdir(path)
            return
        parent = os.open("..", _DIR_FLAGS & ~os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd, done = parent, names.pop()
        with _ignore_missing():
            os.rmdir(done, dir_fd=fd)


def _enter(dir_fd: int, name: str) -> int | None:
    """A descriptor of the folder `name` inside `dir_fd` (made readable and searchable first if need be); None when
    it is not a folder (a link is never followed). A folder that cannot be opened is removed as it stands."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    if st.st_mode & 0o700 != 0o700:
        with _ignore_missing(OSError):
            os.chmod(name, 0o700, dir_fd=dir_fd)  # a folder (lstat said so), so no link is followed here
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        os.rmdir(name, dir_fd=dir_fd)  # raises the real reason when it is not empty
        return None
