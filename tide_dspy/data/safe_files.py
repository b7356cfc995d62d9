"""List and read the files of a folder the user named, which may be a stranger's.

A symlink is followed only when its target stays inside the folder; only regular files are read (a FIFO would
block, a device never ends); a file larger than the cap is skipped before it is read. A file is read by opening
each component of its path inside the folder's descriptor without following links (open_beneath), so that a file
swapped for a link between the listing and the read is refused. Every file left out for one
of these reasons is listed with the reason, so a report can say what it did not read.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_FILE_BYTES = 20_000_000  # per file, for source files and workspace files alike
FILE_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
              stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class UnsafeFileError(ValueError):
    """A file that must not be read: outside the root, not a regular file, or over the size cap."""


@dataclass
class FileListing:
    files: list[str] = field(default_factory=list)  # relative posix paths, safe to read
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}


def unsafe_reason(root: Path, path: Path, max_bytes: int) -> str | None:
    """Why `path` (under `root`) must not be read, or None when it is a regular file inside root within the cap."""
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            return f"a symlink to {target}, outside the folder: not followed"
        if not target.exists():
            return "a broken symlink"
    try:
        info = path.stat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return f"{FILE_KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, not a regular file: not read"
    if info.st_size > max_bytes:
        return f"{info.st_size} bytes, over the {max_bytes}-byte cap per file: not read"
    return None


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    """True when the relative posix `path` matches a glob of `patterns` or lies in a folder named by one
    (--include / --exclude)."""
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in patterns)


def list_files(root: str | Path, wanted: Callable[[str], bool], skip_dir: Callable[[Path], bool]) -> FileListing:
    """Files under root whose name is `wanted`, in sorted order, minus the unsafe ones (listed in `skipped`).

    Folders for which `skip_dir` is true are not entered; symlinked folders are never entered (os.walk does not
    follow them), and one that points outside root is listed."""
    root = Path(root)
    listing = FileListing()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for d in sorted(dirnames):
            if (here / d).is_symlink() and not skip_dir(here / d):
                reason = unsafe_reason(root, here / d, MAX_FILE_BYTES)
                if reason and "outside" in reason:
                    listing.skipped.append({"path": (here / d).relative_to(root).as_posix(), "reason": reason})
        dirnames[:] = sorted(d for d in dirnames if not skip_dir(here / d) and not (here / d).is_symlink())
        for name in sorted(f for f in filenames if wanted(f)):
            rel = (here / name).relative_to(root).as_posix()
            reason = unsafe_reason(root, here / name, MAX_FILE_BYTES)
            if reason is None:
                listing.files.append(rel)
            else:
                listing.skipped.append({"path": rel, "reason": reason})
    return listing


MAX_LINKS = 40  # links followed while opening one path, as the kernel's own bound


def open_beneath(root: str | Path, rel: str | Path) -> int:
    """A descriptor of `rel` under `root`, opened one component at a time inside its parent's descriptor with
    O_NOFOLLOW (the last one non-blocking), so that a file or folder swapped for a link after the listing is never
    followed out of root. A link is resolved here, by its text, and followed only while its target stays inside
    root, as the listing allows (unsafe_reason); else UnsafeFileError."""
    root = Path(root)
    base = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder the user named
    real_root = Path(os.path.realpath(root))
    todo, done, links = list(PurePosixPath(rel).parts), [], 0
    fd = os.dup(base)
    try:
        while todo:
            name = todo.pop(0)
            if name in ("", ".", "/"):
                continue
            if name == "..":
                if not done:
                    raise UnsafeFileError(f"{rel}: leads outside the folder: not read")
                todo, done = [*done[:-1], *todo], []
                os.close(fd)
                fd = os.dup(base)
                continue
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if not todo else os.O_DIRECTORY)
            try:
                inner = os.open(name, flags, dir_fd=fd)
            except OSError:
                if not stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                    raise
                links += 1
                target = PurePosixPath(os.readlink(name, dir_fd=fd))
                if target.is_absolute():
                    if not Path(target).is_relative_to(real_root):
                        raise UnsafeFileError(f"a symlink to {target}, outside the folder: not followed") from None
                    target = Path(target).relative_to(real_root)
                    done = []
                if links > MAX_LINKS:
                    raise UnsafeFileError(f"{rel}: more than {MAX_LINKS} links: not read") from None
                todo, done = [*done, *PurePosixPath(target).parts, *todo], []
                os.close(fd)
                fd = os.dup(base)
                continue
            os.close(fd)
            fd, done = inner, [*done, name]
        return os.dup(fd)
    finally:
        os.close(fd)
        os.close(base)


def read_file(root: str | Path, rel: str | Path, max_bytes: int | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes and the status of the regular file `rel` under `root` (open_beneath), of at most `max_bytes`
    (default MAX_FILE_BYTES); anything else raises UnsafeFileError without blocking (the file is checked after
    opening)."""
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes
    fd = open_beneath(root, rel)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{FILE_KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, "
                                  "not a regular file: not read")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFileError(f"over the {limit}-byte cap per file: not read")
    return data, info


def read_capped(root: str | Path, rel: str | Path, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file `rel` under `root` (read_file)."""
    return read_file(root, rel, max_bytes)[0]
