"""Run a test command on a throwaway copy of a tree, inside a bubblewrap sandbox, and read what it did.

The command and everything it imports are untrusted: the project's own code, a patch a model wrote after reading
that code, and the test files themselves. `run_tests` starts it under bubblewrap (`bwrap`), which gives it

- no network (a network namespace holding only its own loopback), and its own pid, ipc and uts namespaces, so it
  sees no other process, `/proc/<pid>/environ` of tide-dspy included, and every process it starts dies with it;
- a read-only view of the operating system (`/usr`, `/etc`, `/bin`, `/lib*`) and of the Python installations the
  command needs (see `readable_paths`), and nothing else of the machine: no home folder, no checkout, no `.git`;
- a private, empty `/tmp` and `$HOME` (tmpfs), and the copy of the tree mounted read-write at the tree's own path,
  so that an editable install or an absolute `PYTHONPATH` entry that names the tree finds the copy;
- an environment built from an allow-list (`sandbox_environment`), never the parent's;
- rlimits on processes, address space, file size and CPU time (`Limits`), set inside the sandbox, and no
  capabilities. When tide-dspy runs as root the command runs as the user nobody, since root ignores the
  process limit.

Without a working bubblewrap, `Sandbox` refuses (SandboxUnavailable) unless the caller asked for an unsandboxed
run, which only scrubs the environment and bounds time and output.

A passing run is evidence about the patch, not proof: code in the patch runs in the same process as the tests and
can change their outcome. `patch_concerns` names the patches whose result cannot be taken at face value.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
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
from tide_dspy.util.secrets import scrub_secrets

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
class Limits:
    """rlimits of every process in the sandbox; None is unlimited. Memory is address space, per process."""

    processes: int | None = 256  # processes and threads of the sandbox's user, all together
    memory: int | None = 4 << 30  # bytes
    file_size: int | None = 1 << 30  # bytes; also the size of the private /tmp and $HOME
    cpu: int | None = 600  # CPU seconds per process

    NAMES = ("processes", "memory", "file-size", "cpu")

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...] = ()) -> Limits:
        """From `--verify-limit NAME=VALUE` items: processes=512, memory=8G, file-size=2G, cpu=1200, or
        NAME=unlimited."""
        values = {}
        for item in items:
            name, _, text = item.partition("=")
            name = name.strip().lower()
            if name not in cls.NAMES or not text.strip():
                raise VerifyError(f"--verify-limit {item!r}: expected NAME=VALUE with NAME one of "
                                  f"{', '.join(cls.NAMES)} (e.g. --verify-limit memory=8G)")
            values[name.replace("-", "_")] = _limit_value(item, text.strip(), sized=name in ("memory", "file-size"))
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


# ---- the environment ----

ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "FORCE_COLOR", "CI", "SOURCE_DATE_EPOCH",
             "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"}
ENV_PREFIXES = ("LC_", "PYTHON", "PYTEST_")
ENV_DROPPED = {"PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"}  # would point the tests at the user's home


def sandbox_environment(extra: tuple[str, ...] = (), *, home: str, source: dict[str, str] | None = None
                        ) -> dict[str, str]:
    """The variables the tests get: the allow-listed names that do not look secret, the names in `extra` (the
    user's choice, passed as they are), HOME and TMPDIR. Never the rest of the parent's environment."""
    source = dict(os.environ) if source is None else source
    allowed = {k: v for k, v in source.items()
               if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and k not in ENV_DROPPED}
    env = {k: str(v) for k, v in scrub_secrets(allowed).items()}
    env.update({k: source[k] for k in extra if k in source})
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
                         r"\.pth$")
BINARY = re.compile(r"^(GIT binary patch|Binary files .* differ)$", re.M)


def patch_concerns(patch: str, evidence: list[str] | None = None) -> list[str]:
    """Why a patch's test result cannot count as a verified fix, one line per rule it breaks ([] when none):
    it touches tests, a conftest.py, build or config files, files outside `evidence` (the finding's files; not
    checked when None), or binary files."""
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


def with_junit(argv: list[str], junit: Path) -> list[str]:
    return [*argv, f"--junitxml={junit}"] if is_pytest(argv) else list(argv)


def find_executable(exe: str, cwd: Path, path: str) -> Path | None:
    if "/" in exe:
        found = cwd / exe
        return found if found.is_file() and os.access(found, os.X_OK) else None
    hit = shutil.which(exe, path=path)
    return Path(hit) if hit else None


def require_executable(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    exe = argv[0]
    if find_executable(exe, cwd, env.get("PATH", os.defpath)) is None:
        raise VerifyError(f"--verify: the command {exe!r} was not found" + ("" if "/" in exe else " on PATH") +
                          "; give its full path or install it (e.g. --verify \"python -m pytest -q\")")


# ---- what the sandbox can read ----

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PYTHON_NAME = re.compile(r"(python|pypy)[\d.]*")
# Run by each interpreter with -I -S: its prefixes and site-packages folders, without running any site code.
PROBE = ("import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
         "sys.base_exec_prefix, *site.getsitepackages(), site.getusersitepackages()]))")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _system(path: Path) -> bool:
    return any(_inside(path, Path(d)) for d in SYSTEM_DIRS)


def _shebang(exe: Path, path: str) -> Path | None:
    """The interpreter a script's `#!` line names (through `env`), read as text; None for a binary."""
    try:
        with open(exe, "rb") as f:
            line = f.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        hit = shutil.which(words[0], path=path) if words else None
        return Path(hit) if hit else None
    return Path(words[0]) if words else None


def _pth_folders(site_dir: Path) -> list[Path]:
    """Folders that the .pth files of a site-packages folder add to sys.path, read as text (their `import` lines
    are never run)."""
    found = []
    for pth in sorted(site_dir.glob("*.pth")) if site_dir.is_dir() else []:
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        found += [site_dir / line.strip() for line in lines
                  if line.strip() and not line.startswith(("#", "import ", "import\t"))]
    return found


@cache
def _probe(exe: str) -> tuple[str, ...]:
    try:
        out = subprocess.run([exe, "-I", "-S", "-c", PROBE], cwd="/", capture_output=True, timeout=20,
                             env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"})
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else ()
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ()


def _python_folders(exe: Path, root: Path) -> list[Path]:
    """What an interpreter needs: its venv, its prefixes and site-packages, and the folders their .pth files name.
    Nothing inside the tree is ever run outside the sandbox: a venv there is read as files, and only the
    interpreter it links to (or its pyvenv.cfg names) is asked for its folders."""
    here = exe.absolute()
    venv = next((d for d in (here.parent, here.parent.parent) if (d / "pyvenv.cfg").is_file()), None)
    home = next((line.partition("=")[2].strip() for line in _read_lines(venv / "pyvenv.cfg")
                 if line.partition("=")[0].strip() == "home"), "") if venv else ""
    asked = [p for p in (exe.resolve(), Path(home, "python3").resolve() if home else None)
             if p is not None and p.is_file() and not _inside(p, root)][:1]
    folders = ([venv] if venv else []) + [Path(p) for ask in asked for p in _probe(str(ask)) if p]
    sites = [*folders, *(venv.glob("lib/python*/site-packages") if venv else [])]
    return folders + [f for site in sites for f in _pth_folders(site)]


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def readable_paths(argv: list[str], root: Path, env: dict[str, str], extra: tuple[str, ...] = ()) -> list[Path]:
    """Folders and files outside the operating system that the command needs to read: the interpreters it may
    run (tide-dspy's own, the command's, `python3` and `python` on its PATH, each with its .pth folders), the
    command itself, absolute PYTHONPATH entries and `extra`. Never the tree or a folder above it, nor the home
    folder or a folder above it: those would show the checkout's `.git` or the user's keys."""
    path = env.get("PATH", os.defpath)
    exes = [Path(sys.executable)]
    for name in (argv[0], "python3", "python"):
        exe = find_executable(name, root, path)
        if exe is not None:
            exes += [exe] + [p for p in [_shebang(exe, path)] if p is not None]
    wanted: list[Path] = []
    for exe in dict.fromkeys(exes):
        if PYTHON_NAME.fullmatch(exe.name) or PYTHON_NAME.fullmatch(exe.resolve().name):
            wanted += _python_folders(exe, root)
        elif not _inside(exe.absolute(), root):
            wanted += [exe.absolute(), exe.resolve()]
    wanted += [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    wanted += [Path(p) for p in extra]
    home = Path(os.path.expanduser("~")).resolve()
    keep: list[Path] = []
    for p in sorted({Path(os.path.normpath(p.absolute())) for p in wanted}, key=lambda p: len(p.parts)):
        real = p.resolve()  # bwrap follows links: what a path shows is its target
        hidden = (any(_inside(root, q) or _inside(home, q) or _inside(q, root / ".git") for q in (p, real))
                  or _system(p) or not p.exists() or any(_inside(p, k) for k in keep))
        if not hidden:
            keep.append(p)
    return keep


def check_readable(folders: tuple[str, ...], root: Path) -> None:
    """`--verify-read` folders: they must exist, and may not show the tree or the home folder whole."""
    home = Path(os.path.expanduser("~")).resolve()
    for f in folders:
        p = Path(f).resolve()
        if not p.exists():
            raise VerifyError(f"--verify-read {f}: no such file or folder")
        if _inside(root, p) or _inside(home, p):
            what = "the checkout (and its .git)" if _inside(root, p) else "your home folder (and your keys)"
            raise VerifyError(f"--verify-read {f}: this would show {what} to the tests; name a folder inside it")


# ---- the sandbox ----

@dataclass(frozen=True)
class SandboxOptions:
    """How the tests are boxed: `unsandboxed` skips bubblewrap (and says what that risks); `env` names more
    variables to pass; `read_only` more folders the tests may read."""

    unsandboxed: bool = False
    limits: Limits = field(default_factory=Limits)
    env: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()


# Runs first inside the sandbox, as tide-dspy's own interpreter with -I -S: sets the rlimits (inside the new user
# namespace, so the process limit counts the sandbox's processes only), drops root to nobody, then runs the command.
WRAPPER = r"""
import os, resource, sys
limits, uid, argv = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
for item in filter(None, limits.split(",")):
    name, value = item.split("=")
    resource.setrlimit(getattr(resource, name), (int(value), int(value)))
if uid >= 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write(f"tide sandbox: cannot run {argv[0]!r}: {exc.strerror}\n")
    os._exit(127)
"""


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
    mounted at root's path inside the sandbox."""

    def __init__(self, root: str | Path, argv: list[str], options: SandboxOptions = SandboxOptions()):
        self.root, self.argv, self.options = Path(root).resolve(), list(argv), options
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
        home = os.path.expanduser("~") if options.unsandboxed else str(Path(os.path.expanduser("~")).resolve())
        self.home = home if home != "/" else "/home/sandbox"
        self.env = sandbox_environment(options.env, home=self.home)
        if options.unsandboxed:
            self.env["TMPDIR"] = tempfile.gettempdir()
        self.readable = [] if options.unsandboxed else readable_paths(self.argv, self.root, self.env,
                                                                      options.read_only)
        if self.bwrap is not None:
            self._check()

    def _check(self) -> None:
        """One trivial run, so that a sandbox that cannot start fails here, before any LM work."""
        with tempfile.TemporaryDirectory(prefix="tide-sandbox-check-") as scratch:  # seen at root's path
            tree, results = Path(scratch, "tree"), Path(scratch, "results")
            tree.mkdir(), results.mkdir()
            self.prepare(tree, results)
            argv = self.command([sys.executable, "-I", "-S", "-c", "pass"], tree, results)
            try:
                out = subprocess.run(argv, env=self.env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"--verify: bubblewrap ({self.bwrap}) could not start: {exc}") from None
        if out.returncode != 0:
            err = out.stderr.decode(errors="replace").strip()[-500:]
            raise SandboxUnavailable(f"--verify: bubblewrap ({self.bwrap}) cannot create its sandbox here ({err}); "
                                     "it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone"
                                     "=1, or an AppArmor profile for bwrap) or root; else pass --verify-unsandboxed "
                                     "(see what that risks in docs/safety.md)")

    def prepare(self, tree: Path, results: Path) -> None:
        """Make the copy and the results folder writable by the sandbox's user (nobody, when running as root)."""
        if self.bwrap is None or not self.as_root:
            return
        for folder in (tree, results):
            os.lchown(folder, NOBODY, NOBODY)
            os.chmod(folder, 0o755)  # bwrap enters it as root without CAP_DAC_OVERRIDE
            for dirpath, dirnames, filenames in os.walk(folder):
                for name in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, name), NOBODY, NOBODY)

    def command(self, argv: list[str], tree: Path, results: Path) -> list[str]:
        """The full command line that runs argv in `tree` (seen at root's path) with `results` writable."""
        limits = ",".join(f"{k}={v}" for k, v in self.options.limits.rlimits(self.bwrap is not None).items())
        wrapped = [sys.executable, "-I", "-S", "-c", WRAPPER, limits,
                   str(NOBODY if self.as_root and self.bwrap is not None else -1), "--", *argv]
        if self.bwrap is None:
            return wrapped
        return [self.bwrap, *self._mounts(tree, results), "--chdir", str(self.root), "--clearenv",
                *[a for k, v in self.env.items() for a in ("--setenv", k, v)], "--", *wrapped]

    def _mounts(self, tree: Path, results: Path) -> list[str]:
        if self.as_root:  # no user namespace: the wrapper needs CAP_SETUID/SETGID to become nobody
            args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                    "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL",
                    *(["--disable-userns"] if self.version >= (0, 8) else [])]
        args += ["--die-with-parent", "--new-session"]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        args += ["--proc", "/proc", "--dev", "/dev"]
        made: set[Path] = {Path("/")}

        def parents(dest: Path) -> list[str]:
            out = []
            for p in reversed(dest.parents):
                if p not in made and not _system(p):
                    made.add(p)
                    out += ["--perms", "0755", "--dir", str(p)]
            made.add(dest)
            return out

        size = [] if self.options.limits.file_size is None else ["--size", str(self.options.limits.file_size)]
        args += [*parents(Path("/tmp")), "--perms", "1777", *size, "--tmpfs", "/tmp"]
        home, mode = Path(self.home), "1777" if self.as_root else "0700"
        if _inside(home, Path("/tmp")):  # already private: a folder in the /tmp tmpfs
            args += [*parents(home), "--perms", mode, "--dir", str(home)]
        else:
            args += [*parents(home), "--perms", mode, *size, "--tmpfs", str(home)]
        args += [*parents(self.root), "--bind", str(tree), str(self.root)]
        for p in self.readable:
            inside_tree = _inside(p, self.root)
            if inside_tree and (tree / p.relative_to(self.root)).exists():
                continue  # the copy has it (maybe patched); the original must not hide it
            if not inside_tree:
                args += parents(p)
            args += ["--ro-bind", str(p), str(p)]
        args += [*parents(results), "--bind", str(results), str(results)]
        return args


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
        """Check -> passed: each test when junit XML was read, else the command as a whole."""
        if self.outcomes:
            return {t: o in (PASSED, SKIPPED) for t, o in self.outcomes.items()}
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


def read_junit(path: Path) -> dict[str, str]:
    """Test id -> outcome of a pytest junit XML file; {} when it is missing, unreadable, too large or a link (the
    tests wrote it, so it is opened without following links)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read(JUNIT_CAP + 1)
        if len(data) > JUNIT_CAP:
            return {}
        root = ET.fromstring(data)
    except (OSError, ET.ParseError):
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
    """Reads a pipe to its end in a thread, keeping only the last `cap` bytes."""

    def __init__(self, pipe, cap: int):
        self.data, self.total, self.cap, self.pipe = bytearray(), 0, cap, pipe
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):
            self.total += len(chunk)
            self.data += chunk
            del self.data[:-self.cap]
        self.pipe.close()

    def text(self) -> str:
        """The tail so far. Unsandboxed, a process that left the group (setsid) may hold the pipe open; it is not
        waited for."""
        self.thread.join(timeout=5)
        return bytes(self.data).decode(errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(argv: list[str], tree: Path, timeout: float, *, sandbox: Sandbox, results: Path | None = None,
              tests: list[str] = (), output_cap: int = OUTPUT_CAP) -> TestRun:
    """Run argv (then `tests`, e.g. pytest node ids) in `tree` inside `sandbox`, without a shell, in its own
    process group, which is killed whole after `timeout` seconds (and with it the sandbox and all it started).
    `results`: a folder for pytest's junit XML, writable by the tests (default: a temporary one)."""
    require_executable(argv, tree, sandbox.env)
    with contextlib.ExitStack() as stack:
        out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tide-results-"))) if results is None \
            else results
        out.mkdir(parents=True, exist_ok=True)
        junit = out / "junit.xml"
        full = [*with_junit(argv, junit), *tests]
        sandbox.prepare(tree, out)
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(sandbox.command(full, tree, out), cwd=tree, env=sandbox.env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as exc:
            raise VerifyError(f"--verify: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
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
        outcomes = read_junit(junit) if is_pytest(argv) and not timed_out else {}
    return TestRun(argv=full, returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                   seconds=round(time.perf_counter() - started, 2), outcomes=outcomes, output=output,
                   output_bytes=tail.total)
