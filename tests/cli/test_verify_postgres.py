"""``context-manager verify`` on a ``postgresql://`` URI: replayed on a throwaway copy.

The user's schema is only read: its rows are the same afterwards and the copy's schema is gone.
"""

from __future__ import annotations

from typing import Any

from helpers import cli

SESSION = "hello\nhow are you\n/system You are Ada, terse.\nand now\n/tools\nwhat time is it\n"


def _rows(dsn: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        messages = conn.execute("SELECT id, seq, content FROM messages ORDER BY seq").fetchall()
        counter = conn.execute("SELECT last_value FROM counter").fetchone()
        copies = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'cm_verify_%%'"
        ).fetchone()
    return {"messages": messages, "counter": counter, "copies": copies}


def test_verify_on_a_postgres_uri_written_by_run_holds_and_writes_nothing(
    postgres_dsn: str,
) -> None:
    written = cli("run", "--db", postgres_dsn, "--agent", "ada", stdin=SESSION)
    assert written.returncode == 0, written.stderr
    before = _rows(postgres_dsn)

    done = cli("verify", postgres_dsn, "--agent", "ada")

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "5 of 5 replies held."
    assert _rows(postgres_dsn) == before
    assert before["copies"] == (0,)


def test_verify_names_an_agent_the_postgres_schema_does_not_hold(postgres_dsn: str) -> None:
    assert cli("run", "--db", postgres_dsn, "--agent", "ada", stdin="hello\n").returncode == 0
    done = cli("verify", postgres_dsn, "--agent", "bob")
    assert done.returncode == 2
    assert "no agent 'bob'" in done.stderr
    assert _rows(postgres_dsn)["copies"] == (0,)
