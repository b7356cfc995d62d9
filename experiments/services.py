"""Throwaway PostgreSQL clusters and MLflow tracking servers on 127.0.0.1, started and stopped by experiments and tests.

PostgreSQL comes from the Debian package (`apt-get install postgresql`): initdb and pg_ctl refuse to run as root,
so as root the cluster is made and run as the `postgres` user (runuser), in a temporary folder it owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_answering(proc: subprocess.Popen, url: str, seconds: float, log_path: Path, name: str) -> None:
    """Poll `url` until it answers 200; RuntimeError (with the log's tail) if `proc` exits or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not answer within {seconds}s:\n{log_path.read_text()[-3000:]}")
        time.sleep(1)


def postgres_bin() -> Path | None:
    """The folder of initdb/pg_ctl/postgres, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def postgres_missing() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None when they can."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (Debian: apt-get install -y postgresql; .ci/run does this)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (the `distributed` extra: pip install 'psycopg[binary]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot start PostgreSQL as an unprivileged user"
    return None


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_cluster(databases: tuple[str, ...] = ("optuna",)):
    """A new cluster listening on 127.0.0.1 only (trust auth, user `tide`); yields {name: URL} per database.

    Its folder is a fresh one directly under the system temp folder (pytest's tmp_path is not reachable by the
    postgres user) and is deleted afterwards."""
    bindir = postgres_bin()
    folder = Path(tempfile.mkdtemp(prefix="tide-pg-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    port = free_port()

    def run(*cmd, timeout=120):
        done = subprocess.run(_as_owner([str(bindir / cmd[0]), *cmd[1:]]), capture_output=True, text=True,
                              timeout=timeout, cwd=folder)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done

    run("initdb", "-D", str(data), "-U", "tide", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=50"
    run("pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "postgres.log"), "-w", "-t", "60", "start")
    try:
        for name in databases:
            run("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "tide", name)
        yield {name: f"postgresql://tide@127.0.0.1:{port}/{name}" for name in databases}
    finally:
        subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=60, cwd=folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def mlflow_server(folder: Path, backend_uri: str, startup_seconds: float = 120):
    """`mlflow server` on 127.0.0.1 with `backend_uri` as its store and artifacts served from `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = folder / "mlflow-server.log"
    log = log_path.open("w")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", backend_uri, "--artifacts-destination", str(folder / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(proc, url + "/health", startup_seconds, log_path, "mlflow server")
        yield url
    finally:
        # Its own session: the server's worker processes go with it.
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()
        log.close()
