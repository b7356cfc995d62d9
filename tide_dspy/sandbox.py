"""Run a test command on a throwaway copy of a tree, inside a bubblewrap sandbox, and read what it did.

The command and everything it imports are untrusted: the project's own code, a patch a model wrote after reading
that code, and the test files themselves. `run_tests` starts it under bubblewrap (`bwrap`), which gives it

- no network (a network namespace holding only its own loopback), and its own pid, ipc and uts namespaces, so it
  sees no other process, `/proc/<pid>/environ` of tide-dspy included, and every process it starts dies with it;
  no new user namespaces either (a seccomp filter, and bwrap's `--disable-userns` where it has a user namespace);
- a read-only view of the operating system (`/usr`, `/etc`, `/bin`, `/lib*`) and of the Python environment that
  runs tide-dspy (its prefixes, standard library and site-packages, and what their .pth files add outside the home
  folder: `readable_paths`), and nothing else of the machine: no home folder, no checkout, no `.git`. Nothing the
  tree ships decides what is mounted: no `.pth` file, `pyvenv.cfg` or link inside it is read for that. A venv
  inside the tree is part of the tree: it is visible, read-only, at its own place in the copy, and nothing it
  names is mounted;
- the copy of the tree in a size-capped in-memory filesystem at the tree's own path (so that an editable install
  or an absolute `PYTHONPATH` entry that names the tree finds the copy), filled from a read-only view of the
  prepared copy when the run starts, so that nothing the tests write reaches the disk; a private, size-capped
  `/tmp`, `$HOME` and `/dev/shm`;
- an environment built from an allow-list (`sandbox_environment`), never the parent's;
- rlimits on processes, address space, file size and CPU time (`ResourceLimits`), set inside the sandbox, and no
  capabilities. When tide-dspy runs as root the command runs as the user nobody, since root ignores the
  process limit.

The test command runs under a small wrapper (`WRAPPER`) that stays its parent: when the command ends, the wrapper
reads pytest's junit XML (only a regular file, opened non-blocking and without following links, at most
JUNIT_CAP bytes) and hands it to tide-dspy through a pipe. The host never opens a file the tests wrote, and the
whole run, that read included, is killed at its time limit.

Without a working bubblewrap, `Sandbox` refuses (SandboxUnavailable) unless the caller asked for an unsandboxed
run, which only scrubs the environment and bounds time and output.

A passing run is evidence about the patch, not proof: code in the patch runs in the same process as the tests and
can change their outcome. `patch_concerns` names the patches whose result cannot be taken at face value.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tide_dspy.util.diffs import patch_files
from tide_dspy.util.secrets import add_secret_values, scrub_secrets

DEFAULT_RUN_TIMEOUT = 120.0
OUTPUT_CAP = 64 * 1024  # bytes of output kept per run (the tail)
JUNIT_CAP = 32 * 1024 * 1024  # bytes of junit XML read back
PASSED, FAILED, ERROR, SKIPPED, MISSING = "passed", "failed", "error", "skipped", "missing"
NOBODY = 65534
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap; "
                "Arch: pacman -S bubblewrap)")
UNSANDBOXED_RISK = ("--verify-unsandboxed: the tests and the model's patches run as you, outside any sandbox. "
                    "They can read your files and keys, write wherever you can (the checkout and its .git "
                    "included), reach the network, and leave processes running. Only secret-looking variables "
                    "are kept out of their environment.")


class VerifyError(ValueError):
    """The tests cannot run at all (command not found, no sandbox, baseline timed out, ...); the message says why."""


class SandboxUnavailable(VerifyError):
    """bubblewrap is missing or cannot create its namespaces here."""


# ---- limits ----

_SIZE = re.compile(r"(\d+)\s*([kmgt]?)i?b?", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class ResourceLimits:
    """rlimits of every process in the sandbox, and the sizes of its in-memory filesystems; None is unlimited.
    Memory is address space, per process."""

    processes: int | None = 256  # processes and threads of the sandbox's user, all together
    memory: int | None = 4 << 30  # bytes
    file_size: int | None = 1 << 30  # bytes; also the size of the private /tmp, $HOME and /dev/shm
    cpu: int | None = 600  # CPU seconds per process
    disk: int | None = 2 << 30  # bytes: the copy of the tree and everything the tests write into it, together

    NAMES = ("processes", "memory", "file-size", "cpu", "disk")
    SIZED = ("memory", "file-size", "disk")

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...] = ()) -> ResourceLimits:
        """From `--verify-limit NAME=VALUE` items: processes=512, memory=8G, file-size=2G, cpu=1200, disk=4G, or
        NAME=unlimited."""
        values = {}
        for item in items:
            name, _, text = item.partition("=")
            name = name.strip().lower()
            if name not in cls.NAMES or not text.strip():
                raise VerifyError(f"--verify-limit {item!r}: expected NAME=VALUE with NAME one of "
                                  f"{', '.join(cls.NAMES)} (e.g. --verify-limit memory=8G)")
            values[name.replace("-", "_")] = _limit_value(item, text.strip(), sized=name in cls.SIZED)
        return cls(**values)

    def rlimits(self, processes: bool = True) -> dict[str, int]:
        limits = {"RLIMIT_CORE": 0, "RLIMIT_AS": self.memory, "RLIMIT_FSIZE": self.file_size,
                  "RLIMIT_CPU": self.cpu, **({"RLIMIT_NPROC": self.processes} if processes else {})}
        return {k: v for k, v in limits.items() if v is not None}


def _limit_value(item: str, text: str, sized: bool) -> int | None:
    if text.lower() in ("unlimited", "none"):
        return None
    m = _SIZE.fullmatch(text) if sized else re.fullmatch(r"\d+", text)
    value = int(m.group(1)) * _UNITS[m.group(2).lower()] if sized and m else int(text) if m else 0
    if value < 1:
        unit, example = (" with K, M or G", "8G") if sized else ("", "512")
        raise VerifyError(f"--verify-limit {item!r}: expected a positive whole number{unit} or 'unlimited' "
                          f"(e.g. {item.partition('=')[0]}={example})")
    return value


def size_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# ---- the environment ----

ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "FORCE_COLOR", "CI", "SOURCE_DATE_EPOCH",
             "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"}
ENV_PREFIXES = ("LC_", "PYTHON", "PYTEST_")
ENV_DROPPED = {"PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"}  # would point the tests at the user's home


def sandbox_environment(extra: tuple[str, ...] = (), *, home: str, source: dict[str, str] | None = None
                        ) -> dict[str, str]:
    """The variables the tests get: the allow-listed names that do not look secret, the names in `extra` (the
    user's choice, passed as they are), HOME and TMPDIR. Never the rest of the parent's environment. The values
    passed through `extra` are scrubbed from everything tide-dspy shows or writes (util.secrets), whatever their
    names: the tests can print them."""
    source = dict(os.environ) if source is None else source
    allowed = {k: v for k, v in source.items()
               if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and k not in ENV_DROPPED}
    env = {k: str(v) for k, v in scrub_secrets(allowed).items()}
    passed = {k: source[k] for k in extra if k in source}
    add_secret_values(passed.values())
    env.update(passed)
    env.setdefault("PATH", os.defpath)
    env.update(HOME=home, TMPDIR="/tmp")
    return env


# ---- what a patch's result is worth ----

TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$")
CONFIG_NAMES = {"setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "pytest.ini", "noxfile.py", "Makefile",
                "makefile", "GNUmakefile", "MANIFEST.in", ".coveragerc", "sitecustomize.py", "usercustomize.py",
                "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock", "Jenkinsfile", ".gitlab-ci.yml",
                ".travis.yml", "azure-pipelines.yml", "appveyor.yml", ".pre-commit-config.yaml", ".gitattributes",
                ".gitmodules", ".env"}
CONFIG_PATH = re.compile(r"(^|/)(\.github|\.circleci|\.gitlab|\.buildkite|\.ci|\.git)/|(^|/)requirements[^/]*\.txt$|"
                         r"\.pth$|(^|/)pyvenv\.cfg$")
BINARY = re.compile(r"^(GIT binary patch|Binary files .* differ)$", re.M)


def patch_concerns(patch: str, evidence: list[str] | None = None) -> list[str]:
    """Why a patch's test result cannot count as a verified fix, one line per rule it breaks ([] when none):
    it touches tests, a conftest.py, build or config files, files outside `evidence` (the finding's files; not
    checked when None), or binary files. The files are every name the patch gives, read as `git apply` reads them
    (util.diffs.parse_patch)."""
    files = patch_files(patch)
    rules = [
        ("touches conftest.py", [f for f in files if f.rsplit("/", 1)[-1] == "conftest.py"]),
        ("touches tests", [f for f in files if TEST_PATH.search(f) and not f.endswith("conftest.py")]),
        ("touches build or config files",
         [f for f in files if f.rsplit("/", 1)[-1] in CONFIG_NAMES or CONFIG_PATH.search(f)]),
        ("touches files outside the finding's evidence",
         [f for f in files if evidence is not None and f not in evidence]),
    ]
    concerns = [f"{rule}: {', '.join(hits[:5])}" + (f" and {len(hits) - 5} more" if len(hits) > 5 else "")
                for rule, hits in rules if hits]
    if BINARY.search(patch) or "\0" in patch:
        concerns.append("changes binary files")
    return concerns


# ---- the command ----

def parse_command(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise VerifyError(f"--verify {command!r}: cannot split it into arguments ({exc}); check the quotes") from None
    if not argv:
        raise VerifyError("--verify needs a test command, e.g. --verify \"python -m pytest -q\"")
    return argv


def is_pytest(argv: list[str]) -> bool:
    name = Path(argv[0]).name
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    return name in ("pytest", "py.test") or module == "pytest"


def with_junit(argv: list[str], junit: str | None) -> list[str]:
    return [*argv, f"--junitxml={junit}"] if junit and is_pytest(argv) else list(argv)


def find_executable(exe: str, cwd: Path, path: str) -> Path | None:
    if "/" in exe:
        found = cwd / exe
        return found if found.is_file() and os.access(found, os.X_OK) else None
    hit = shutil.which(exe, path=path)
    return Path(hit) if hit else None


def require_executable(argv: list[str], cwd: Path, env: dict[str, str], *also: Path) -> None:
    """argv[0] must be found in `cwd` (a path with a /) or on PATH, or in one of `also` (folders holding what the
    sandbox mounts at the tree's path, for a relative path)."""
    exe = argv[0]
    path = env.get("PATH", os.defpath)
    if find_executable(exe, cwd, path) is None and not any(find_executable(exe, d, path) for d in also if "/" in exe):
        raise VerifyError(f"--verify: the command {exe!r} was not found" + ("" if "/" in exe else " on PATH") +
                          "; give its full path or install it (e.g. --verify \"python -m pytest -q\")")


# ---- what the sandbox can read ----

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PYTHON_NAME = re.compile(r"(python|pypy)[\d.]*")
# Run by an interpreter outside the tree and the home folder, with -I -S: its prefixes and site-packages folders
# (never the user site), without running any site code.
PROBE = ("import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
         "sys.base_exec_prefix, *site.getsitepackages()]))")


def _system(path: Path) -> bool:
    return any(path.is_relative_to(Path(d)) for d in SYSTEM_DIRS)


def home_folder() -> Path:
    return Path(os.path.expanduser("~")).resolve()


def tide_environment() -> list[Path]:
    """The environment tide-dspy runs in: its interpreter's prefixes and standard library, and the site-packages
    of its venv (never the user site). The user chose this environment, so it is shown even when it lies in the
    home folder; the tests need it to run the interpreter tide-dspy runs on (`python -m pytest`)."""
    import site
    import sysconfig

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
             *(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))]
    return [Path(p) for p in dict.fromkeys(p for p in paths if p)]


def _pth_folders(site_dir: Path) -> list[Path]:
    """The folders that the .pth files of one of tide-dspy's own site-packages add to sys.path (an editable
    install, a shared folder of packages), read as text: their `import` lines are never run. Only tide-dspy's
    environment is read this way, never a folder of the tree."""
    found = []
    try:
        files = sorted(p for p in site_dir.iterdir() if p.suffix == ".pth")
    except OSError:
        return []
    for pth in files:
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        found += [site_dir / line.strip() for line in lines
                  if line.strip() and not line.startswith(("#", "import ", "import\t"))]
    return found


def _first_line(exe: Path) -> bytes:
    """The first line of a file, read without blocking and only from a regular file."""
    try:
        fd = os.open(exe, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, 512).split(b"\n", 1)[0] if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)


def _shebang(exe: Path, cwd: Path, path: str) -> Path | None:
    """The interpreter a script's `#!` line names (through `env`), absolute; None for a binary."""
    line = _first_line(exe)
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        hit = shutil.which(words[0], path=path) if words else None
        return Path(hit) if hit else None
    return (cwd / words[0]) if words else None


@cache
def _probe(exe: str) -> tuple[str, ...]:
    try:
        out = subprocess.run([exe, "-I", "-S", "-c", PROBE], cwd="/", capture_output=True, timeout=20,
                             env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"})
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else ()
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ()


def _venv_of(exe: Path, root: Path) -> str | None:
    """The venv inside the tree that `exe` (a path inside the tree) runs from, relative to the tree: the folder
    above it that holds a pyvenv.cfg. Read as files only: nothing in the venv decides what else is mounted. A venv
    that is a link out of the tree is none."""
    here = Path(os.path.normpath(exe.absolute()))
    for folder in (here.parent, here.parent.parent):
        if folder.is_relative_to(root) and folder != root and (folder / "pyvenv.cfg").is_file():
            real = folder.resolve()
            return folder.relative_to(root).as_posix() if real.is_relative_to(root.resolve()) else None
    return None


def tree_venvs(argv: list[str], root: Path, env: dict[str, str]) -> list[str]:
    """The venvs inside the tree (relative paths) that the command may run from: the command's own, its `#!`
    interpreter's, `python3`'s and `python`'s on PATH, and tide-dspy's own when it lies in the tree. They are the
    tree's code: shown read-only at their own place in the copy, their .pth files and pyvenv.cfg never read."""
    path = env.get("PATH", os.defpath)
    exes = [Path(sys.executable), Path(sys.prefix) / "bin" / "python"]
    for name in (argv[0], "python3", "python"):
        exe = find_executable(name, root, path)
        if exe is not None:
            exes.append(exe)
            if Path(os.path.normpath(exe.absolute())).is_relative_to(root):
                exes += [p for p in [_shebang(exe, root, path)] if p is not None]
    return list(dict.fromkeys(v for exe in exes for v in [_venv_of(exe, root)] if v))


def readable_paths(argv: list[str], root: Path, env: dict[str, str], extra: tuple[str, ...] = ()) -> list[Path]:
    """Folders and files outside the operating system and the tree that the command needs to read: tide-dspy's
    own environment (`tide_environment`), the interpreters the command may run when they lie outside the tree
    and the home folder (each one's prefixes and site-packages, as it reports them), the command itself, absolute
    PYTHONPATH entries and `extra` (--verify-read). Never a path read from a file inside the tree, never the tree
    or a folder above it, and nothing in the home folder but tide-dspy's environment and `extra`: those would
    show the checkout's `.git` or the user's keys."""
    path = env.get("PATH", os.defpath)
    own = tide_environment()
    trusted = [*own, *(Path(p) for p in extra)]
    # What tide-dspy's own site-packages add through .pth files: the user's environment, never the tree's (a
    # site-packages inside the tree is the tree's venv, not read), and like any other path never the home folder.
    wanted: list[Path] = [f for site in own if site.name == "site-packages" and not site.is_relative_to(root)
                          for f in _pth_folders(site)]
    for name in (argv[0], "python3", "python"):
        exe = find_executable(name, root, path)
        if exe is None or Path(os.path.normpath(exe.absolute())).is_relative_to(root):
            continue  # the tree's own: the copy (and its venvs) has it
        for candidate in [exe, *[p for p in [_shebang(exe, root, path)] if p is not None]]:
            if PYTHON_NAME.fullmatch(candidate.name) or PYTHON_NAME.fullmatch(candidate.resolve().name):
                if not candidate.resolve().is_relative_to(home_folder()):
                    wanted += [Path(p) for p in _probe(str(candidate.resolve())) if p]
            else:
                wanted += [candidate.absolute(), candidate.resolve()]
    wanted += [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    return visible(wanted, trusted, root)


def visible(wanted: list[Path], trusted: list[Path], root: Path) -> list[Path]:
    """The paths of `wanted` and `trusted` the sandbox may show: each existing, outside the operating system's
    folders (already shown), neither the tree, a folder above it or in it, nor the home folder or a folder above
    it; in the home folder only when trusted. Nested ones are shown through their outermost folder."""
    home = home_folder()
    trusted_set = {Path(os.path.normpath(p.absolute())) for p in trusted}
    keep: list[Path] = []
    for p in sorted({Path(os.path.normpath(p.absolute())) for p in [*wanted, *trusted]}, key=lambda p: len(p.parts)):
        try:
            real, exists = p.resolve(), p.exists()  # bwrap follows links: what a path shows is its target
        except OSError:  # a folder this user may not enter (Path.exists raises PermissionError there)
            continue
        shows = (p, real)
        hidden = (any(root.is_relative_to(q) or q.is_relative_to(root) or home.is_relative_to(q) for q in shows)
                  or (p not in trusted_set and any(q.is_relative_to(home) for q in shows))
                  or _system(p) or not exists or any(p.is_relative_to(k) for k in keep))
        if not hidden:
            keep.append(p)
    return keep


def check_readable(folders: tuple[str, ...], root: Path) -> None:
    """`--verify-read` folders: they must exist, and may not show the tree or the home folder whole."""
    home = home_folder()
    for f in folders:
        p = Path(f).resolve()
        if not p.exists():
            raise VerifyError(f"--verify-read {f}: no such file or folder")
        if root.is_relative_to(p) or home.is_relative_to(p):
            what = "the checkout (and its .git)" if root.is_relative_to(p) else "your home folder (and your keys)"
            raise VerifyError(f"--verify-read {f}: this would show {what} to the tests; name a folder inside it")


# ---- no new user namespaces: a seccomp filter ----

# (audit arch, unshare, clone, clone3) per architecture this filter knows; the compat ABI of x86-64 too.
_SYSCALLS = {"x86_64": [(0xC000003E, 272, 56, 435), (0x40000003, 310, 120, 435)],
             "aarch64": [(0xC00000B7, 97, 220, 435)]}
_CLONE_NEWUSER = 0x10000000
_EPERM, _ENOSYS = 1, 38


def userns_filter() -> bytes | None:
    """A seccomp BPF program (struct sock_filter[], for bwrap --seccomp) that refuses `unshare` and `clone` with
    CLONE_NEWUSER (EPERM) and `clone3` (ENOSYS, whose flags it cannot read: libc then falls back to clone), so
    nothing in the sandbox makes a user namespace, whoever runs tide-dspy. Any other architecture (the x32 ABI
    included) is refused every call. None on a machine whose system calls it does not know."""
    tables = _SYSCALLS.get(platform.machine())
    if tables is None:
        return None
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | _EPERM, 0x00050000 | _ENOSYS
    prog: list[tuple] = [(ld, 0, 0, 4)]  # the architecture
    for n, (arch, *_rest) in enumerate(tables):
        prog.append((jeq, f"arch{n}", None, arch))
    prog.append((ret, 0, 0, eperm))
    for n, (_arch, unshare, clone, clone3) in enumerate(tables):
        prog += [f"arch{n}", (ld, 0, 0, 0)]  # the system call number
        if n == 0 and platform.machine() == "x86_64":
            prog.append((jge, "eperm", None, 0x40000000))  # the x32 ABI
        prog += [(jeq, "enosys", None, clone3), (jeq, "flags", None, unshare), (jeq, "flags", None, clone),
                 (ret, 0, 0, allow)]
    prog += ["flags", (ld, 0, 0, 16), (jset, "eperm", None, _CLONE_NEWUSER), (ret, 0, 0, allow),
             "enosys", (ret, 0, 0, enosys), "eperm", (ret, 0, 0, eperm)]
    labels, code = {}, []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    def jump(target, pc: int) -> int:  # BPF jumps are relative to the next instruction
        return 0 if target is None or isinstance(target, int) else labels[target] - pc - 1

    return b"".join(struct.pack("<HBBI", op, jump(jt, pc), jump(jf, pc), k) for pc, (op, jt, jf, k) in enumerate(code))


# ---- the sandbox ----

@dataclass(frozen=True)
class SandboxOptions:
    """How the tests are boxed: `unsandboxed` skips bubblewrap (and says what that risks); `env` names more
    variables to pass; `read_only` more folders the tests may read."""

    unsandboxed: bool = False
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    env: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()


# Runs first inside the sandbox, as tide-dspy's own interpreter with -I -S. It drops root to nobody, fills the
# in-memory copy from the read-only source, then runs the command in a child with the rlimits (set inside the new
# user namespace, so the process limit counts the sandbox's processes only). When the child ends, it reads the
# junit file (a regular file only, never through a link, never blocking, at most `cap` bytes), writes it to the
# relay pipe and exits with the child's status.
WRAPPER = r"""
import json, os, resource, shutil, stat, sys
cfg, argv = json.loads(sys.argv[1]), sys.argv[3:]
relay = cfg["relay"]
if cfg["uid"] >= 0:
    os.setgroups([]); os.setgid(cfg["uid"]); os.setuid(cfg["uid"])
folders = [""] if cfg["source"] else []
while folders:  # the copy, folder by folder (no recursion): links as links, files with their mode and times
    rel = folders.pop()
    try:
        for entry in os.scandir(os.path.join(cfg["source"], rel)):
            here = os.path.join(rel, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), here)
            elif entry.is_dir():
                os.makedirs(here, exist_ok=True)
                folders.append(here)
            elif entry.is_file():
                shutil.copy2(entry.path, here)
    except OSError as exc:
        sys.stderr.write(f"tide sandbox: cannot copy {rel or 'the tree'} into the sandbox: {exc}\n")
        os._exit(125)
pid = os.fork()
if pid == 0:
    os.close(relay)
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"tide sandbox: cannot run {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
data = b""
if cfg["junit"]:
    try:
        fd = os.open(cfg["junit"], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                data = os.read(fd, cfg["cap"] + 1)
                while 0 < len(data) <= cfg["cap"] and (more := os.read(fd, cfg["cap"] + 1 - len(data))):
                    data += more
        except OSError:
            data = b""
        finally:
            os.close(fd)
view = memoryview(data)
try:
    while view:
        view = view[os.write(relay, view):]
except OSError:
    pass
os._exit(128 - code if code < 0 else code)
"""

SOURCE = "/.tide-source"  # where the prepared copy is seen, read-only, inside the sandbox
SANDBOX_JUNIT = "/tmp/tide-results/junit.xml"  # where pytest writes its junit XML inside the sandbox
MIN_BWRAP = (0, 5)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@cache
def bwrap_version(bwrap: str) -> tuple[int, ...]:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


class Sandbox:
    """Where the test runs of one tree happen. `root` is the tree whose copies the tests run in: each copy is
    seen at root's path inside the sandbox."""

    def __init__(self, root: str | Path, argv: list[str], options: SandboxOptions = SandboxOptions()):
        self.root, self.argv, self.options = Path(root).resolve(), list(argv), options
        if Path(SOURCE).is_relative_to(self.root):
            raise VerifyError(f"--verify: a tree at {self.root} cannot be verified (its path is the sandbox's own)")
        self.as_root = os.geteuid() == 0
        check_readable(options.read_only, self.root)  # the user's options first, then this machine
        self.bwrap = None if options.unsandboxed else bwrap_path()
        if not options.unsandboxed and self.bwrap is None:
            raise SandboxUnavailable(f"--verify runs the project's tests and the model's patches inside bubblewrap "
                                     f"(bwrap), which is not on PATH: {INSTALL_HINT}, or pass --verify-unsandboxed "
                                     "to run them without a sandbox (see what that risks in docs/safety.md)")
        self.version = bwrap_version(self.bwrap) if self.bwrap is not None else ()
        if self.bwrap is not None and self.version < MIN_BWRAP:
            raise SandboxUnavailable(f"--verify: bubblewrap {'.'.join(map(str, self.version)) or '(unknown version)'} "
                                     f"at {self.bwrap} is too old (it needs {'.'.join(map(str, MIN_BWRAP))} or newer "
                                     f"for --perms and --size); {INSTALL_HINT}, or pass --verify-unsandboxed")
        home = os.path.expanduser("~") if options.unsandboxed else str(home_folder())
        self.home = home if home != "/" else "/home/sandbox"
        self.env = sandbox_environment(options.env, home=self.home)
        if options.unsandboxed:
            self.env["TMPDIR"] = tempfile.gettempdir()
        self.readable = [] if options.unsandboxed else readable_paths(self.argv, self.root, self.env,
                                                                      options.read_only)
        self.venvs = [] if options.unsandboxed else tree_venvs(self.argv, self.root, self.env)
        self.seccomp = userns_filter() if self.bwrap is not None else None
        if self.bwrap is not None:
            self._check_command_is_shown()
            self._check()

    def _check_command_is_shown(self) -> None:
        """A command outside the tree that the sandbox does not show (it lies in the home folder) is a clear error
        here, not a 'not found' in the baseline."""
        exe = find_executable(self.argv[0], self.root, self.env.get("PATH", os.defpath))
        if exe is None or Path(os.path.normpath(exe.absolute())).is_relative_to(self.root):
            return
        shown = [Path(d) for d in SYSTEM_DIRS] + self.readable
        if not any(q.is_relative_to(p) or q.is_relative_to(p.resolve())
                   for q in (exe.absolute(), exe.resolve()) for p in shown):
            raise VerifyError(f"--verify: the command {self.argv[0]!r} is {exe.resolve()}, which the sandbox does not "
                              "show (only the operating system, the Python environment tide-dspy runs in and the "
                              "tree are visible, never your home folder); pass --verify-read with its folder, e.g. "
                              f"--verify-read {exe.resolve().parent.parent}")

    def _check(self) -> None:
        """One trivial run, so that a sandbox that cannot start fails here, before any LM work."""
        with tempfile.TemporaryDirectory(prefix="tide-sandbox-check-") as scratch:
            tree = Path(scratch, "tree")
            tree.mkdir()
            try:
                run = run_tests([sys.executable, "-I", "-S", "-c", "pass"], tree, 60, sandbox=self)
            except (OSError, VerifyError) as exc:
                raise SandboxUnavailable(f"--verify: bubblewrap ({self.bwrap}) could not start: {exc}") from None
        if run.returncode != 0:
            err = run.output.strip()[-500:]
            raise SandboxUnavailable(f"--verify: bubblewrap ({self.bwrap}) cannot create its sandbox here ({err}); "
                                     "it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone"
                                     "=1, or an AppArmor profile for bwrap) or root; else pass --verify-unsandboxed "
                                     "(see what that risks in docs/safety.md)")

    def require_executable(self, argv: list[str], tree: Path) -> None:
        """argv[0] must exist in the copy, on PATH, or (a path into a venv of the tree) in the tree's venv."""
        exe = Path(os.path.normpath(self.root / argv[0]))
        in_venv = "/" in argv[0] and any(exe.is_relative_to(self.root / v) for v in self.venvs)
        require_executable(argv, tree, self.env, *([self.root] if in_venv else []))

    def prepare(self, tree: Path) -> None:
        """Make the copy readable by the sandbox's user (nobody, when running as root)."""
        if self.bwrap is None or not self.as_root:
            return
        os.lchown(tree, NOBODY, NOBODY)
        os.chmod(tree, 0o755)  # bwrap enters it as root without CAP_DAC_OVERRIDE
        for dirpath, dirnames, filenames in os.walk(tree):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), NOBODY, NOBODY)

    def command(self, argv: list[str], tree: Path, junit: str | None, relay: int, seccomp: int | None) -> list[str]:
        """The full command line that runs argv in a copy of `tree` (seen at root's path), handing the junit file
        to the pipe `relay`; `seccomp`: the descriptor of userns_filter()."""
        sandboxed = self.bwrap is not None
        config = {"limits": self.options.limits.rlimits(sandboxed), "uid": NOBODY if self.as_root and sandboxed
                  else -1, "source": SOURCE if sandboxed else "", "junit": junit, "relay": relay, "cap": JUNIT_CAP}
        wrapped = [sys.executable, "-I", "-S", "-c", WRAPPER, json.dumps(config), "--", *argv]
        if not sandboxed:
            return wrapped
        return [self.bwrap, *self._mounts(tree, seccomp), "--chdir", str(self.root), "--clearenv",
                *[a for k, v in self.env.items() for a in ("--setenv", k, v)], "--", *wrapped]

    def _mounts(self, tree: Path, seccomp: int | None) -> list[str]:
        if self.as_root:  # no user namespace: the wrapper needs CAP_SETUID/SETGID to become nobody
            args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                    "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL",
                    *(["--disable-userns"] if self.version >= (0, 8) else [])]
        args += ["--die-with-parent", "--new-session", *(["--seccomp", str(seccomp)] if seccomp is not None else [])]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        limits = self.options.limits
        size = [] if limits.file_size is None else ["--size", str(limits.file_size)]
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", *size, "--tmpfs", "/dev/shm"]
        made: set[Path] = {Path("/")}

        def parents(dest: Path) -> list[str]:
            out = []
            for p in reversed(dest.parents):
                if p not in made and not _system(p):
                    made.add(p)
                    out += ["--perms", "0755", "--dir", str(p)]
            made.add(dest)
            return out

        args += [*parents(Path("/tmp")), "--perms", "1777", *size, "--tmpfs", "/tmp"]
        home, mode = Path(self.home), "1777" if self.as_root else "0700"
        if home.is_relative_to(Path("/tmp")):  # already private: a folder in the /tmp tmpfs
            args += [*parents(home), "--perms", mode, "--dir", str(home)]
        else:
            args += [*parents(home), "--perms", mode, *size, "--tmpfs", str(home)]
        args += [*parents(Path(SOURCE)), "--ro-bind", str(tree), SOURCE]
        disk = [] if limits.disk is None else ["--size", str(limits.disk)]
        args += [*parents(self.root), "--perms", "0777" if self.as_root else "0755", *disk, "--tmpfs", str(self.root)]
        for rel in self.venvs:
            if not os.path.lexists(tree / rel):  # not part of the copy (git ignores it): the tree's own, read-only
                args += ["--ro-bind", str(self.root / rel), str(self.root / rel)]
        for p in self.readable:
            args += [*parents(p), "--ro-bind", str(p), str(p)]
        return args

    @contextlib.contextmanager
    def started(self, argv: list[str], tree: Path, junit: str | None, relay: int, **popen):
        """The running sandbox (a Popen) of argv in a copy of `tree`, in its own session."""
        fds, seccomp = [relay], None
        if self.seccomp is not None and self.bwrap is not None:
            read_end, write_end = os.pipe()
            os.write(write_end, self.seccomp)
            os.close(write_end)
            fds.append(read_end)
            seccomp = read_end
        try:
            proc = subprocess.Popen(self.command(argv, tree, junit, relay, seccomp), cwd=tree, env=self.env,
                                    pass_fds=fds, start_new_session=True, **popen)
        except OSError as exc:
            raise VerifyError(f"--verify: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        finally:
            if seccomp is not None:
                os.close(seccomp)
        yield proc


_AVAILABLE: dict[str, str | None] = {}


def sandbox_unavailable() -> str | None:
    """Why no sandbox can run here (a sentence), or None when bubblewrap works; checked once per process."""
    if "reason" not in _AVAILABLE:
        with tempfile.TemporaryDirectory(prefix="tide-sandbox-probe-") as root:
            try:
                Sandbox(root, [sys.executable])
                _AVAILABLE["reason"] = None
            except SandboxUnavailable as exc:
                _AVAILABLE["reason"] = str(exc)
    return _AVAILABLE["reason"]


# ---- a run and its results ----

@dataclass(frozen=True)
class TestRun:
    """One run of the test command."""

    argv: list[str]
    returncode: int | None  # None when it timed out
    timed_out: bool
    seconds: float
    outcomes: dict[str, str]  # test id -> passed | failed | error | skipped, from pytest's junit XML
    output: str  # the last OUTPUT_CAP bytes of stdout and stderr
    output_bytes: int  # all of it

    @property
    def passed(self) -> bool:
        return not self.timed_out and self.returncode == 0

    def checks(self, command: str) -> dict[str, bool]:
        """Check -> passed: each test when junit XML was read (only a test that ran and passed passes: skipped and
        xfailed are not passes), else the command as a whole."""
        if self.outcomes:
            return {t: o == PASSED for t, o in self.outcomes.items()}
        return {command: self.passed}

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        counts = {}
        for o in self.outcomes.values():
            counts[o] = counts.get(o, 0) + 1
        tests = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        return f"exit {self.returncode}" + (f", {tests}" if tests else "") + f", {self.seconds:.1f} s"


def junit_id(classname: str, name: str) -> str:
    return f"{classname}::{name}" if classname else name


def nodeid_key(nodeid: str) -> str:
    """The junit_id of a pytest node id (tests/test_a.py::TestX::test_y[1] -> tests.test_a.TestX::test_y[1])."""
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return junit_id(".".join([module, *parts[1:-1]]), parts[-1]) if len(parts) > 1 else module


def parse_junit(data: bytes) -> dict[str, str]:
    """Test id -> outcome of pytest's junit XML; {} when it is empty, over JUNIT_CAP or does not parse. xfailed
    tests are `skipped` there, like skipped ones."""
    if not data or len(data) > JUNIT_CAP:
        return {}
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return {}
    outcomes = {}
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = (
            ERROR if "error" in kinds else FAILED if "failure" in kinds else SKIPPED if "skipped" in kinds else PASSED
        )
        test = junit_id(case.get("classname", ""), case.get("name", ""))
        if outcomes.get(test) not in (FAILED, ERROR):  # a teardown error is reported as a second entry
            outcomes[test] = outcome
    return outcomes


class _Tail:
    """Reads a pipe to its end in a thread, keeping only the last `cap` bytes (or, `head`, the first `cap`)."""

    def __init__(self, pipe, cap: int, head: bool = False):
        self.data, self.total, self.cap, self.pipe, self.head = bytearray(), 0, cap, pipe, head
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):
            self.total += len(chunk)
            if self.head:
                self.data += chunk[:max(0, self.cap - len(self.data))]
            else:
                self.data += chunk
                del self.data[:-self.cap]
        self.pipe.close()

    def bytes(self) -> bytes:
        """What was read so far. A process that left the group (setsid, unsandboxed) or holds the pipe open may
        keep it from ending; it is not waited for."""
        self.thread.join(timeout=5)
        return bytes(self.data)

    def text(self) -> str:
        return self.bytes().decode(errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(argv: list[str], tree: Path, timeout: float, *, sandbox: Sandbox, tests: list[str] = (),
              output_cap: int = OUTPUT_CAP) -> TestRun:
    """Run argv (then `tests`, e.g. pytest node ids) in a copy of `tree` inside `sandbox`, without a shell, in its
    own process group, which is killed whole after `timeout` seconds (and with it the sandbox and all it started).
    pytest's junit XML comes back through a pipe from the sandbox's wrapper, never read here from a file the tests
    could have replaced."""
    sandbox.require_executable(argv, tree)
    with contextlib.ExitStack() as stack:
        junit = None
        if is_pytest(argv):
            junit = SANDBOX_JUNIT if sandbox.bwrap is not None else str(
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tide-results-"))) / "junit.xml")
        full = [*with_junit(argv, junit), *tests]
        sandbox.prepare(tree)
        read_end, write_end = os.pipe()
        results = _Tail(os.fdopen(read_end, "rb"), JUNIT_CAP + 1, head=True)
        started = time.perf_counter()
        try:
            proc = stack.enter_context(sandbox.started(full, tree, junit, write_end, stdin=subprocess.DEVNULL,
                                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        finally:
            os.close(write_end)
        tail = _Tail(proc.stdout, output_cap)
        timed_out = False
        try:
            proc.wait(timeout=max(timeout, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)  # on timeout, and (unsandboxed) any background child left behind
            proc.wait()
        output = tail.text()
        outcomes = parse_junit(results.bytes()) if junit and not timed_out else {}
    return TestRun(argv=full, returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                   seconds=round(time.perf_counter() - started, 2), outcomes=outcomes, output=output,
                   output_bytes=tail.total)
