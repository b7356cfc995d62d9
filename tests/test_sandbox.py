"""The sandbox of `--verify` / `--verify-repo`, attacked for real inside bubblewrap: each effect must fail; git on a
hostile checkout runs nothing its config names; limits refuse NaN and infinity; --verify refuses without bwrap."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from tide_dspy import sandbox as sandbox_module
from tide_dspy.cli.main import main
from tide_dspy.data.git_tools import GitClone, Snapshot
from tide_dspy.product import discover_repository
from tide_dspy.product import verify as verify_module
from tide_dspy.product.patches import PatchChecker
from tide_dspy.product.run import select_files
from tide_dspy.product.verify import FLAGGED, tree_files
from tide_dspy.sandbox import (
    ResourceLimits,
    Sandbox,
    SandboxOptions,
    VerifyError,
    patch_concerns,
    run_tests,
    sandbox_unavailable,
)
from tide_dspy.util.git import head_sha
from tide_dspy.util.safe_write import remove_tree

FIXTURE = Path(__file__).parent / "fixtures" / "verify_repo"
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"
needs_bwrap = pytest.mark.skipif(sandbox_unavailable() is not None, reason=f"no sandbox: {sandbox_unavailable()}")
FAKE_KEY = "-----BEGIN FAKE PRIVATE KEY----- do-not-read"
SECRETS = {"OPENAI_KEY": "sk-fake-openai-value", "DB_PASS": "fake-db-password", "MY_PAT": "ghp-fake-pat-value",
           "OPENAI_API_KEY": "sk-fake-api-key-value"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "calc")
    return root


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home folder with a private key in it, and secrets in the environment."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_rsa").write_text(FAKE_KEY)
    (folder / ".bashrc").write_text("# untouched\n")
    monkeypatch.setenv("HOME", str(folder))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return folder


def digest(root: Path) -> str:
    """A hash over every file and link under root, .git included, never following links."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            path = Path(dirpath) / name
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return h.hexdigest()


def run_python(tree: Path, code: str, timeout: float = 60, **options) -> str:
    """Run `code` with this interpreter in `tree` (seen at its own path) inside the sandbox; its output."""
    run = run_tests([sys.executable, "-c", code], tree, timeout,
                    sandbox=Sandbox(tree, [sys.executable], SandboxOptions(**options)))
    return run.output


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts, for a few seconds at most."""

    def __init__(self, seconds: float = 20):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port, self.accepted, self.until = self.sock.getsockname()[1], 0, time.monotonic() + seconds
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while time.monotonic() < self.until:
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except TimeoutError:
                continue
            except OSError:
                break

    def close(self) -> None:
        self.until = 0
        self.thread.join(timeout=5)
        self.sock.close()


# ---- the H1 attack, through `tide discover repo --verify` ----

ATTACK = r'''
import json, os, socket, subprocess, sys, time

import pytest

log = {}
# A child in a session of its own that would live on after pytest ends (MARKER finds it among the processes).
OUTLIVE = "import time  # MARKER\ntime.sleep(60)"


def attempt(name, fn):
    try:
        log[name] = ["ok", fn()]
    except BaseException as exc:
        log[name] = ["failed", repr(exc)]


def write_everywhere():
    """Into the checkout (found through the parent's command line and the copy's location) and its hooks."""
    found = {os.getcwd(), os.path.expanduser("~")}
    for pid in {os.getppid(), 1}:
        try:
            found |= {a for a in open(f"/proc/{pid}/cmdline").read().split("\0") if a.startswith("/")}
        except OSError:
            pass
    wrote = []
    for target in sorted(p for p in found if os.path.isdir(p)):
        for path in (os.path.join(target, "OWNED"), os.path.join(target, ".git", "hooks", "pre-commit"),
                     os.path.join(target, ".bashrc")):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "a") as f:
                    f.write("echo owned\n")
                wrote.append(path)
            except OSError:
                pass
    return wrote


def environments():
    seen = {"self": dict(os.environ)}
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
        try:
            seen[pid] = open(f"/proc/{pid}/environ").read()
        except OSError as exc:
            seen[pid] = repr(exc)
    return seen


def fork_many():
    started = 0
    try:
        for _ in range(LIMIT + 20):
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            started += 1
    except OSError as exc:
        return [started, repr(exc)]
    return [started, "no error"]


attempt("write", write_everywhere)
attempt("key", lambda: open(os.path.expanduser("~/.ssh/id_rsa")).read())
attempt("environ", environments)
attempt("connect", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=2).close())
attempt("setsid", lambda: subprocess.Popen([sys.executable, "-c", OUTLIVE], start_new_session=True).pid)
attempt("fork", fork_many)
print("ATTACK-LOG " + json.dumps(log), flush=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"  # every test "passes": a fix, were the patch believed
'''


def new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def survivors(marker: str) -> list[str]:
    """Processes of this machine whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


@needs_bwrap
def test_the_h1_attack_fails_inside_the_sandbox_and_is_not_verified(repo, home, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    runs: list = []  # each run's output, where the attack logs what it could do (pytest -s)
    real_run = verify_module.run_tests
    monkeypatch.setattr(verify_module, "run_tests", lambda *a, **k: runs.append(real_run(*a, **k)) or runs[-1])
    listener = Listener()
    limit = 40
    marker = f"tide-h1-{os.getpid()}-{time.monotonic_ns()}"
    attack = ATTACK.replace("PORT", str(listener.port)).replace("LIMIT", str(limit)).replace("MARKER", marker)
    finding = {"description": "mean divides by n - 1", "evidence_ids": ["calc/ops.py::mean"],
               "patch": new_file_patch("tests/conftest.py", attack), "used_template_id": "", "why": ""}
    before, home_before = digest(repo), digest(home)
    try:
        result = discover_repository(
            repo, lm=DummyLM([{"findings": json.dumps([finding])}, {"findings": "[]"}]), backbone="none-shipped",
            per_round=1, verify=PYTEST + " -s", verify_timeout=60, progress=lambda line: None,
            verify_sandbox=SandboxOptions(limits=ResourceLimits(processes=limit)))
        time.sleep(2)
        late = survivors(marker)
    finally:
        listener.close()
    [v] = result.verifications
    assert v.status == FLAGGED and not v.label.startswith("verified")
    assert "touches conftest.py: tests/conftest.py" in v.label and v.fixed == ["tests.test_ops::test_mean"]
    [log] = [json.loads(line.split(" ", 1)[1]) for run in runs for line in run.output.splitlines()
             if line.startswith("ATTACK-LOG ")]  # the attack ran once, in the patched copy
    assert digest(repo) == before and not (repo / ".git" / "hooks" / "pre-commit").exists()  # (a)
    assert digest(home) == home_before and list(scratch.iterdir()) == []
    assert log["write"][0] == "ok" and not any(Path(p).exists() and not Path(p).is_relative_to(home)
                                               for p in log["write"][1])  # what it wrote stayed in the sandbox
    assert log["key"][0] == "failed" and FAKE_KEY not in json.dumps(log)  # (b)
    environ = json.dumps(log["environ"])
    assert not any(name in environ or value in environ for name, value in SECRETS.items())  # (c)
    assert log["connect"][0] == "failed" and listener.accepted == 0  # (d)
    started, error = log["fork"][1]
    assert started < limit and "Resource temporarily unavailable" in error  # (e)
    assert log["setsid"][0] == "ok" and late == []  # (f) nothing outlived the run


# ---- one effect at a time ----

@needs_bwrap
def test_nothing_outside_the_copy_is_writable(tmp_path, home):
    tree = tmp_path / "tree"
    tree.mkdir()
    targets = [tmp_path / "beside-the-copy", home / ".bashrc", Path(sys.prefix) / "planted", Path("/usr/planted")]
    code = ("import sys\n"
            f"for path in {[str(t) for t in targets] + [str(tree / 'inside')]!r}:\n"
            "    try:\n        open(path, 'a').write('x'); print('wrote', path)\n"
            "    except OSError as exc:\n        print('refused', path, exc.errno)\n")
    out = run_python(tree, code)
    assert f"wrote {tree / 'inside'}" in out and not (tree / "inside").exists()  # in the in-memory copy only
    assert not (tmp_path / "beside-the-copy").exists() and (home / ".bashrc").read_text() == "# untouched\n"
    assert not (Path(sys.prefix) / "planted").exists() and not Path("/usr/planted").exists()


@needs_bwrap
def test_home_and_its_keys_are_out_of_sight(tmp_path, home):
    tree = tmp_path / "tree"
    tree.mkdir()
    out = run_python(tree, "import os; print(os.environ['HOME'], sorted(os.listdir(os.path.expanduser('~'))))\n"
                           "print(open(os.path.expanduser('~/.ssh/id_rsa')).read())")
    assert f"{home} []" in out and "FileNotFoundError" in out and FAKE_KEY not in out


@needs_bwrap
def test_the_parent_environment_is_out_of_reach(tmp_path, home):
    tree = tmp_path / "tree"
    tree.mkdir()
    code = ("import os\nprint(dict(os.environ))\n"
            "for pid in [p for p in os.listdir('/proc') if p.isdigit()] + [str(os.getppid())]:\n"
            "    try:\n        print(pid, open(f'/proc/{pid}/environ').read())\n"
            "    except OSError as exc:\n        print(pid, exc)\n")
    out = run_python(tree, code)
    assert "PATH" in out
    assert not any(name in out or value in out for name, value in SECRETS.items())


@needs_bwrap
def test_there_is_no_network(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    listener = Listener()
    try:
        out = run_python(tree, f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)")
    finally:
        listener.close()
    assert "ConnectionRefusedError" in out and listener.accepted == 0


@needs_bwrap
def test_the_process_limit_stops_a_fork_bomb(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    # The children wait until the sandbox ends, however slowly the machine forks them.
    code = (
        "import os, signal\nn = 0\ntry:\n    for _ in range(60):\n        if os.fork() == 0:\n"
        "            signal.pause(); os._exit(0)\n        n += 1\nexcept OSError as exc:\n    print('stopped', exc)\n"
        "print('started', n, flush=True)"
    )
    out = run_python(tree, code, limits=ResourceLimits(processes=20))
    started = int(out.split("started ")[1].split()[0])
    assert "stopped" in out and started < 20


@needs_bwrap
def test_a_setsid_child_dies_with_the_sandbox(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    marker = f"tide-outlive-{os.getpid()}-{time.monotonic_ns()}"
    child = f"import time  # {marker}\ntime.sleep(60)"
    out = run_python(tree, f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {child!r}], "
                           "start_new_session=True); print('left a child')")
    time.sleep(2)
    assert "left a child" in out and survivors(marker) == []


@needs_bwrap
def test_the_file_size_limit_holds(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    code = ("import os, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "try:\n    open('big', 'wb').write(b'x' * 3_000_000); print('wrote it all')\n"
            "except OSError as exc:\n    print('refused', exc)\nprint('size', os.path.getsize('big'))")
    out = run_python(tree, code, limits=ResourceLimits(file_size=1 << 20))
    assert "File too large" in out and int(out.split("size ")[1].split()[0]) <= 1 << 20


@needs_bwrap
def test_the_memory_limit_holds(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    out = run_python(tree, "b = bytearray(2 << 30); print('allocated')", limits=ResourceLimits(memory=512 << 20))
    assert "MemoryError" in out and "allocated" not in out


@needs_bwrap
def test_the_copy_is_seen_at_the_checkout_path_without_its_git(repo, tmp_path):
    tree = tmp_path / "copy"
    tree.mkdir()
    (tree / "only-in-the-copy.txt").write_text("the copy")
    code = ("import os; print(os.getcwd(), open('only-in-the-copy.txt').read(), "
            f"os.path.exists({str(repo / '.git')!r}), os.path.exists({str(repo / 'calc')!r}))")
    run = run_tests([sys.executable, "-c", code], tree, 60, sandbox=Sandbox(repo, [sys.executable]))
    assert f"{repo} the copy False False" in run.output


@needs_bwrap
def test_a_venv_inside_the_checkout_runs_pytest(repo, tmp_path):
    (repo / ".gitignore").write_text(".venv/\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    import pytest as pytest_module

    site = next((repo / ".venv" / "lib").glob("python*/site-packages"))
    (site / "outer.pth").write_text(str(Path(pytest_module.__file__).parent.parent) + "\n")  # where pytest lives
    python = repo / ".venv" / "bin" / "python"
    tree = tmp_path / "copy"
    tree.mkdir()
    run = run_tests([str(python), "-m", "pytest", "--version"], tree, 60, sandbox=Sandbox(repo, [str(python)]))
    assert run.passed and "pytest" in run.output


def test_verify_limit_values_are_parsed_and_bad_ones_named():
    parsed = ResourceLimits.parse(["memory=8G", "processes=512", "cpu=unlimited"])
    assert parsed == ResourceLimits(processes=512, memory=8 << 30, cpu=None)
    with pytest.raises(VerifyError, match="--verify-limit 'memory=lots': expected a positive whole number"):
        ResourceLimits.parse(["memory=lots"])
    with pytest.raises(VerifyError, match="NAME one of processes, memory, file-size, cpu"):
        ResourceLimits.parse(["threads=4"])


def test_extra_variables_pass_only_by_name(tmp_path, monkeypatch):
    from tide_dspy.sandbox import sandbox_environment

    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "site.settings")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-this-one")
    env = sandbox_environment(("DJANGO_SETTINGS_MODULE",), home="/home/x")
    assert env["DJANGO_SETTINGS_MODULE"] == "site.settings" and "OPENAI_API_KEY" not in env
    assert env["HOME"] == "/home/x" and env["TMPDIR"] == "/tmp"


# ---- refusing without a sandbox ----

@pytest.fixture
def path_without_bwrap(tmp_path, monkeypatch) -> Path:
    """PATH holding git and python, and no bwrap."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, target in (("git", shutil.which("git")), ("python", sys.executable)):
        os.symlink(target, folder / name)
    monkeypatch.setenv("PATH", str(folder))
    return folder


def test_verify_refuses_without_bubblewrap(repo, path_without_bwrap, capsys):
    dspy.configure(lm=DummyLM([]))  # refused before any LM call
    rc = main(["discover", "repo", str(repo), "--verify", "python -m pytest -q", "--out", str(repo.parent / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "inside bubblewrap (bwrap), which is not on PATH" in err
    assert "apt install bubblewrap" in err and "--verify-unsandboxed" in err
    assert not (repo.parent / "o").exists()


def test_verify_repo_refuses_without_bubblewrap(repo, path_without_bwrap, tmp_path, capsys):
    rc = main(["evaluate", "--setting", "repository", "--data", str(tmp_path), "--method", "iter", "--no-track",
               "--verify-repo", str(repo)])
    assert rc == 2 and "apt install bubblewrap" in capsys.readouterr().err


def test_verify_unsandboxed_says_what_it_risks_and_runs(repo, path_without_bwrap, capsys):
    dspy.configure(lm=DummyLM([{"findings": "[]"}, {"findings": "[]"}]))
    rc = main(["discover", "repo", str(repo), "--verify", "python -m pytest -q -p no:cacheprovider",
               "--verify-unsandboxed", "--out", str(repo.parent / "o"), "--backbone", "none-shipped"])
    captured = capsys.readouterr()
    assert rc == 0 and "can read your files and keys, write wherever you can" in captured.err
    assert "without a sandbox (baseline)" in captured.out and "verify: baseline exit 1" in captured.out


def test_sandbox_options_need_verify(repo, capsys):
    assert main(["discover", "repo", str(repo), "--verify-limit", "memory=8G"]) == 2
    assert "need --verify CMD" in capsys.readouterr().err
    assert main(["discover", "repo", str(repo), "--verify", "pytest", "--verify-read", str(repo.parent)]) == 2
    assert "--verify-read" in capsys.readouterr().err


# ---- limits refuse NaN and infinity ----

FLOAT_OPTIONS = [
    (["discover", "repo", "."], "--verify-timeout"),
    (["discover", "repo", "."], "--verify-total"),
    (["discover", "repo", "."], "--temperature"),
    (["evaluate", "--setting", "repository", "--method", "iter"], "--verify-timeout"),
    (["compile", "--setting", "repository"], "--val-fraction"),
    (["distill", "--setting", "repository"], "--merge-threshold"),
]


@pytest.mark.parametrize("command,option", FLOAT_OPTIONS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_float_options_refuse_nan_and_infinity(command, option, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, f"{option}={value}"])
    assert exit_.value.code == 2
    assert f"argument {option}: expected a finite number, got {value!r}" in capsys.readouterr().err


@pytest.mark.parametrize("option,value,message", [("--verify-timeout", "0", "must be above 0"),
                                                  ("--verify-total", "-5", "must be above 0"),
                                                  ("--temperature", "-0.1", "must be at least 0")])
def test_float_options_refuse_out_of_range_values(option, value, message, capsys):
    with pytest.raises(SystemExit):
        main(["discover", "repo", ".", f"{option}={value}"])
    assert message in capsys.readouterr().err


# ---- git on a hostile checkout runs nothing its config names ----

@pytest.fixture
def hostile(tmp_path) -> Path:
    """A checkout whose .git/config names an fsmonitor and a filter driver that write marker files, with a
    stat-dirty file so that git would consult both."""
    root = tmp_path / "hostile"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitattributes").write_text("*.py filter=evil\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "calc")
    marks = tmp_path / "marks"
    marks.mkdir()
    with open(root / ".git" / "config", "a") as f:
        f.write(f'[core]\n\tfsmonitor = "touch {marks}/fsmonitor; false"\n'
                f'[filter "evil"]\n\tclean = "touch {marks}/clean; cat"\n\tsmudge = "touch {marks}/smudge; cat"\n'
                f'\tprocess = "touch {marks}/process"\n')
    ops = root / "calc" / "ops.py"
    ops.write_text(ops.read_text() + "\n# edited\n")
    os.utime(ops, (0, 0))
    return root


def _since(root: Path):
    return select_files(root, since="HEAD")


def _copy(root: Path):
    return tree_files(root)


def _check_patch(root: Path):
    return PatchChecker(root).check("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
                                    "@@ -1,2 +1,2 @@\n def mean(values):\n-    return sum(values) / (len(values) - 1)\n"
                                    "+    return sum(values) / len(values)\n")


def _dirty_head(root: Path):
    return head_sha(root)


def _archive(root: Path):
    with GitClone(root).snapshot(git(root, "rev-parse", "HEAD").strip(), None) as snap:
        return sorted(p.name for p in snap.tree.iterdir())


@pytest.mark.parametrize("operation", [_since, _copy, _check_patch, _dirty_head, _archive],
                         ids=["since", "verify-copy", "patch-check", "dirty-head", "archive"])
def test_git_runs_nothing_the_checkouts_config_names(hostile, operation):
    operation(hostile)
    assert sorted(p.name for p in (hostile.parent / "marks").iterdir()) == []


def test_since_still_finds_the_changed_files_of_a_hostile_checkout(hostile):
    assert _since(hostile).files == ["calc/ops.py"]


# ---- what a patch's result is worth ----

def diff(path: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize("path,rule", [
    ("tests/test_ops.py", "touches tests: tests/test_ops.py"),
    ("pkg/test_util.py", "touches tests: pkg/test_util.py"),
    ("pkg/util_test.py", "touches tests: pkg/util_test.py"),
    ("pkg/tests/helpers.py", "touches tests: pkg/tests/helpers.py"),
    ("conftest.py", "touches conftest.py: conftest.py"),
    ("src/pkg/conftest.py", "touches conftest.py: src/pkg/conftest.py"),
    ("setup.py", "touches build or config files: setup.py"),
    ("pyproject.toml", "touches build or config files: pyproject.toml"),
    ("tox.ini", "touches build or config files: tox.ini"),
    ("pytest.ini", "touches build or config files: pytest.ini"),
    ("noxfile.py", "touches build or config files: noxfile.py"),
    ("Makefile", "touches build or config files: Makefile"),
    (".github/workflows/ci.yml", "touches build or config files: .github/workflows/ci.yml"),
    ("requirements-dev.txt", "touches build or config files: requirements-dev.txt"),
    ("pkg/other.py", "touches files outside the finding's evidence: pkg/other.py"),
])
def test_each_rule_of_patch_concerns(path, rule):
    assert rule in patch_concerns(diff(path), evidence=["pkg/ops.py"])


def test_a_patch_within_its_evidence_raises_no_concern():
    assert patch_concerns(diff("pkg/ops.py"), evidence=["pkg/ops.py"]) == []
    assert patch_concerns(diff("pkg/other.py")) == []  # evidence unknown: not checked


def test_a_binary_patch_is_a_concern():
    patch = "diff --git a/pkg/ops.py b/pkg/ops.py\nindex 1..2 100644\nGIT binary patch\nliteral 5\nMcmZ\n"
    assert patch_concerns(patch, evidence=["pkg/ops.py"]) == ["changes binary files"]



# ---- nothing the checkout ships decides what the sandbox shows ----

@pytest.fixture
def planted_venv(repo, home) -> Path:
    """A venv inside the checkout whose .pth names the user's keys and a git-ignored .env, and a script whose `#!`
    runs that venv's python."""
    (repo / ".gitignore").write_text(".venv/\n.env\n")
    (repo / ".env").write_text("DEPLOY_TOKEN=from-the-ignored-env\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    site = next((repo / ".venv" / "lib").glob("python*/site-packages"))
    (site / "zz.pth").write_text(f"{home / '.ssh'}\n{repo / '.env'}\n{home}\n")
    script = repo / "runtests"
    script.write_text("#!.venv/bin/python3\nimport sys; print(sys.argv)\n")
    script.chmod(0o755)
    return repo


LOOK = ("import os\n"
        "for path in {paths!r}:\n"
        "    try:\n        print('read', path, open(path).read())\n"
        "    except OSError as exc:\n        print('refused', path, type(exc).__name__)\n")


@needs_bwrap
@pytest.mark.parametrize("command", [".venv/bin/python", "./runtests"])
def test_a_pth_file_in_the_checkouts_venv_mounts_nothing(planted_venv, home, tmp_path, command):
    repo = planted_venv
    sandbox = Sandbox(repo, [command])
    shown = [str(p) for p in sandbox.readable]
    assert not any(p.startswith((str(home), str(repo))) for p in shown), shown
    tree = tmp_path / "copy"
    tree.mkdir()
    paths = [str(home / ".ssh" / "id_rsa"), str(repo / ".env")]
    out = run_tests([".venv/bin/python", "-c", LOOK.format(paths=paths)], tree, 60, sandbox=sandbox).output
    assert FAKE_KEY not in out and "from-the-ignored-env" not in out
    assert all(f"refused {p}" in out for p in paths), out


@needs_bwrap
def test_the_checkouts_venv_runs_inside_the_copy_read_only(planted_venv, tmp_path):
    tree = tmp_path / "copy"
    tree.mkdir()
    code = "import sys; print(sys.prefix); open(sys.prefix + '/planted', 'w')"
    run = run_tests([".venv/bin/python", "-c", code], tree, 60, sandbox=Sandbox(planted_venv, [".venv/bin/python"]))
    assert f"{planted_venv / '.venv'}\n" in run.output and "Read-only file system" in run.output
    assert not (planted_venv / ".venv" / "planted").exists()


def test_a_command_in_the_home_folder_needs_verify_read(repo, home):
    tool = home / "tools" / "bin" / "runtests"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    if sandbox_unavailable() is not None:
        pytest.skip(sandbox_unavailable())
    with pytest.raises(VerifyError, match=f"pass --verify-read with its folder, e.g. --verify-read {home / 'tools'}"):
        Sandbox(repo, [str(tool)])
    assert Sandbox(repo, [str(tool)], SandboxOptions(read_only=(str(home / "tools"),))).readable


# ---- every resource bounded ----

@needs_bwrap
def test_what_the_tests_write_into_the_copy_is_capped_in_total(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    code = ("n = 0\ntry:\n    for i in range(20):\n        open(f'part{i}', 'wb').write(b'x' * (1 << 20)); n += 1\n"
            "except OSError as exc:\n    print('refused', exc)\nprint('wrote', n)")
    out = run_python(tree, code, limits=ResourceLimits(disk=6 << 20, file_size=4 << 20))
    assert "No space left on device" in out and int(out.split("wrote ")[1].split()[0]) <= 6
    assert list(tree.iterdir()) == []  # none of it reached the disk


@needs_bwrap
def test_dev_shm_is_private_and_capped(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    name = f"tide-shm-{os.getpid()}-{time.monotonic_ns()}"
    code = (f"import os\nn = 0\ntry:\n    for i in range(8):\n        open(f'/dev/shm/{name}-{{i}}', 'wb')"
            ".write(b'x' * (1 << 20)); n += 1\nexcept OSError as exc:\n    print('refused', exc)\nprint('wrote', n)")
    out = run_python(tree, code, limits=ResourceLimits(file_size=3 << 20))
    assert "No space left on device" in out and int(out.split("wrote ")[1].split()[0]) <= 3
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(name)]


@needs_bwrap
def test_a_tree_over_the_quota_is_refused_before_anything_is_copied(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    tree = tmp_path / "plain"
    tree.mkdir()
    with open(tree / "sparse.bin", "wb") as f:
        f.truncate(64 << 20)  # 64 MiB that take no room on disk
    from tide_dspy.product.verify import Verifier

    with pytest.raises(VerifyError, match=r"sparse.bin \(64.0 MiB, sparse\).*--verify-limit disk=SIZE"):
        Verifier(tree, PYTEST, sandbox=SandboxOptions(limits=ResourceLimits(disk=16 << 20)))
    assert list(scratch.iterdir()) == []


def test_cleanup_survives_a_tree_thousands_of_folders_deep(tmp_path):
    snap = Snapshot(tmp_path / "snap")
    (snap.root / "tree").mkdir(parents=True)
    fd = os.open(snap.tree, os.O_RDONLY)
    try:
        for _ in range(5000):  # deeper than any path the kernel takes whole, and than Python's recursion limit
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.symlink(str(tmp_path / "outside"), "link", dir_fd=fd)
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "kept").write_text("not removed through a link")
        os.close(fd)
        snap.close()
        assert not snap.root.exists() and (tmp_path / "outside" / "kept").exists()
    finally:  # pytest's own cleanup of old temporary folders recurses: never leave the chain to it
        remove_tree(snap.root)


@needs_bwrap
def test_a_deep_tree_written_by_the_tests_leaves_nothing_behind(repo, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d'); os.chdir('d')\nprint('deep')"
    from tide_dspy.product.verify import Verifier

    with Verifier(repo, f"{sys.executable} -c {shlex.quote(deep)}") as verifier:
        baseline = verifier.run_baseline()
    assert "deep" in baseline.output and list(scratch.iterdir()) == []


UNSHARE = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "print('unshare', libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))\n"
           "import subprocess\ntry:\n    print(subprocess.run(['unshare', '-U', 'true'], capture_output=True, "
           "text=True).stderr)\nexcept OSError as exc:\n    print('no unshare tool', exc)")


@needs_bwrap
def test_the_tests_cannot_make_user_namespaces(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    out = run_python(tree, UNSHARE)
    assert "unshare -1 Operation not permitted" in out, out
    assert "no unshare tool" in out or "Operation not permitted" in out.split("unshare -1", 1)[1]


@needs_bwrap
def test_a_fifo_in_place_of_the_junit_file_does_not_hang_the_run(repo, tmp_path):
    (repo / "conftest.py").write_text(
        "import os\n\ndef pytest_unconfigure(config):\n    path = config.option.xmlpath\n"
        "    if path:\n        os.remove(path); os.mkfifo(path)\n")
    tree = tmp_path / "copy"
    shutil.copytree(repo, tree, ignore=shutil.ignore_patterns(".git"))
    runs = []
    worker = threading.Thread(target=lambda: runs.append(run_tests(
        shlex.split(PYTEST), tree, 60, sandbox=Sandbox(repo, shlex.split(PYTEST)))), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert runs, "the run hung on the FIFO"
    [run] = runs
    assert not run.timed_out and run.outcomes == {} and run.returncode == 1


def test_only_tide_dspys_own_pth_files_are_read_and_never_for_the_home_folder(repo, home, tmp_path, monkeypatch):
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    shared = tmp_path / "shared-packages"
    shared.mkdir()
    (home / "dev").mkdir()
    (site / "extra.pth").write_text(f"{shared}\nimport os; os.system('echo never run')\n{home / 'dev'}\n")
    monkeypatch.setattr(sandbox_module, "tide_environment", lambda: [tmp_path / "env", site])
    shown = sandbox_module.readable_paths([sys.executable], repo, {"PATH": os.defpath})
    assert shared in shown  # a shared folder of packages, named by the environment tide-dspy runs in
    assert not any(p == home / "dev" or home in p.parents for p in shown)


def test_a_path_this_user_may_not_enter_is_left_out_without_a_traceback(repo, tmp_path, monkeypatch):
    locked = tmp_path / "locked" / "inner"
    real_exists = Path.exists

    def exists(self):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    shown = sandbox_module.readable_paths([sys.executable], repo, {"PATH": os.defpath, "PYTHONPATH": str(locked)})
    assert locked not in shown
