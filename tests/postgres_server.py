"""A throwaway PostgreSQL server for the tests and CI: ``initdb`` in a folder, a free port, stop.

Used by ``tests/conftest.py`` (when ``CONTEXT_MANAGER_POSTGRES_DSN`` is unset) and by ``.ci/run``
(``python tests/postgres_server.py start DIR`` prints the ``export`` lines, ``stop DIR`` stops it).
As root, the server runs as the ``postgres`` user (PostgreSQL refuses to run as root). Durability
is relaxed (``fsync=off``): the tests kill clients and restart the server cleanly, never the
machine.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import attrs

SUPERUSER = "cm"
DATABASE = "context_manager_test"


@attrs.frozen
class Server:
    """A running server: ``dsn`` reaches ``DATABASE``; ``data`` is its folder, when we know it."""

    dsn: str
    data: Path | None

    def restart(self) -> None:
        """Stop fast (every session is cut off) and start again on the same port and options."""
        assert self.data is not None, "a server given by DSN alone cannot be restarted"
        _pg_ctl(self.data, "restart", "-m", "fast", "-w", "-l", str(self.data.parent / "log"))

    def stop(self) -> None:
        if self.data is not None:
            _pg_ctl(self.data, "stop", "-m", "immediate", "-w", check=False)


def binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or ``None`` when PostgreSQL is missing."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _runner() -> list[str]:
    """How to run a server command: as ourselves, or, as root, as the ``postgres`` user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"], check=True, capture_output=True
        )
    return ["runuser", "-u", "postgres", "--"]


def _pg_ctl(data: Path, *args: str, check: bool = True) -> None:
    bin_dir = binaries()
    assert bin_dir is not None
    subprocess.run(
        [*_runner(), str(bin_dir / "pg_ctl"), "-D", str(data), *args],
        check=check,
        capture_output=True,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(folder: Path) -> Server:
    """``initdb`` in ``folder/data``, start on a free port on 127.0.0.1, create ``DATABASE``.

    Raises:
        RuntimeError: PostgreSQL is not installed or the server did not start (with its log).
    """
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb on PATH or in /usr/lib)")
    folder.mkdir(parents=True, exist_ok=True)
    runner = _runner()
    if runner:
        shutil.chown(folder, "postgres")
    data = folder / "data"
    subprocess.run(
        [
            *runner,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    options = (
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c full_page_writes=off -c max_connections=200"
    )
    started = subprocess.run(
        [
            *runner,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "-l",
            str(folder / "log"),
            "start",
        ],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        log = (folder / "log").read_text() if (folder / "log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()} {log.strip()}")
    # the restart keeps these options: pg_ctl remembers them in postmaster.opts
    base = f"postgresql://{SUPERUSER}@127.0.0.1:{port}"
    import psycopg  # the tests' dependency, not the server's

    try:
        with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}".encode())
    except psycopg.Error as err:
        raise RuntimeError(f"cannot create the test database: {err}") from err
    return Server(dsn=f"{base}/{DATABASE}", data=data)


def main(argv: list[str]) -> int:
    """``start DIR`` prints shell ``export`` lines; ``stop DIR`` stops the server in ``DIR``."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python tests/postgres_server.py start|stop DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1]).resolve()
    if argv[0] == "stop":
        _pg_ctl(folder / "data", "stop", "-m", "immediate", "-w", check=False)
        return 0
    server = start(folder)
    print(f"export CONTEXT_MANAGER_POSTGRES_DSN='{server.dsn}'")
    print(f"export CONTEXT_MANAGER_POSTGRES_DATA='{server.data}'")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def fresh_schema(dsn: str) -> tuple[str, str]:
    """A new empty schema on ``dsn``'s database: ``(its name, a DSN with it as search_path)``.

    A URI stays a URI (the command line takes ``postgresql://`` URIs only).
    """
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}".encode())
    if dsn.startswith(("postgresql://", "postgres://")) and "?" not in dsn:
        return schema, f"{dsn}?options=-c%20search_path%3D{schema}"
    return schema, make_conninfo(dsn, options=f"-c search_path={schema}")


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
