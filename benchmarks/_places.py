"""Where a benchmark history lives: a SQLite file, or a PostgreSQL database; and how to copy it.

A place opens a fresh store on itself and copies itself as it is now (no store may be open on it
then): a file copy for SQLite, ``CREATE DATABASE ... TEMPLATE`` for PostgreSQL. ``cleanup``
removes what the run created (PostgreSQL databases; SQLite files go with the work folder).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Protocol

import attrs

from context_manager import PostgresStore, SQLiteStore, Store


class Place(Protocol):
    """A history's home."""

    def open(self) -> Store: ...

    def snapshot(self, name: str) -> Place: ...

    def cleanup(self) -> None: ...


@attrs.frozen
class FilePlace:
    """A SQLite file."""

    path: Path

    def open(self) -> Store:
        return SQLiteStore(self.path)

    def snapshot(self, name: str) -> FilePlace:
        copy = self.path.with_name(f"{name}.db")
        for suffix in ("", "-wal"):
            if os.path.exists(f"{self.path}{suffix}"):
                shutil.copyfile(f"{self.path}{suffix}", f"{copy}{suffix}")
        return FilePlace(copy)

    def cleanup(self) -> None:
        pass


@attrs.frozen
class DatabasePlace:
    """A PostgreSQL database on the server ``admin_dsn`` reaches, created by this run."""

    admin_dsn: str
    database: str
    made: list[str] = attrs.field(factory=list, eq=False)

    @classmethod
    def create(cls, admin_dsn: str) -> DatabasePlace:
        place = cls(admin_dsn, f"cm_bench_{uuid.uuid4().hex[:10]}")
        place._admin(f"CREATE DATABASE {place.database}")
        place.made.append(place.database)
        return place

    def dsn(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.admin_dsn, dbname=self.database)

    def open(self) -> Store:
        return PostgresStore(self.dsn())

    def snapshot(self, name: str) -> DatabasePlace:
        copy = f"{self.database}_{name.replace('-', '_')}"
        for attempt in range(50):  # the closed store's sessions may take a moment to end
            try:
                self._admin(f"CREATE DATABASE {copy} TEMPLATE {self.database}")
                break
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.1)
        self.made.append(copy)
        return DatabasePlace(self.admin_dsn, copy, self.made)

    def cleanup(self) -> None:
        for database in reversed(self.made):
            self._admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        self.made.clear()

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(statement.encode())
