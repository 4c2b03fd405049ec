"""The digest of this library's source that a render snapshot's header names (``_snapshot``).

Invariants:

- The digest is of the source's content: every ``*.py`` file under the package, by relative
  path and bytes, so two hosts running the same release (a shared PostgreSQL store) agree, and
  any change to any file changes it.
- Reading 1.3 MB of source costs a restarted host's first compile about a third of its time, so
  the digest is also kept in a small file beside the package's bytecode
  (``__pycache__/code-digest.json``), keyed by each file's path, size and modification time: a
  fresh process that finds every file as the key says reuses it; anything else (a file edited,
  added or removed, an unreadable or malformed cache) computes it from the content again. The
  cache is written only when the folder allows (as Python writes its bytecode); failing to
  write it changes nothing but the cost. The key takes one walk of the folders and one ``stat``
  per file, on plain strings (``listing``): the system calls are most of its cost.
- Pure functions of the files on disk; the caller keeps the result once per process.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
"""The ``context_manager`` package whose source the digest covers."""

CACHE_NAME = "code-digest.json"
"""The cache file, in the package's ``__pycache__`` folder."""


def sources(root: Path = PACKAGE) -> list[str]:
    """Every ``*.py`` file under ``root`` (bytecode folders aside), as sorted relative paths."""
    return [path for path, _, _ in listing(str(root))]


def listing(root: str) -> list[tuple[str, int, int]]:
    """Each of ``sources(root)``, in its order, with its size and modification time: one walk of
    the folders (``os.scandir``, plain strings; a linked folder is not entered, as ``os.walk``
    does not), one ``stat`` per file."""
    found: list[tuple[str, int, int]] = []
    folders = [""]
    while folders:
        here = folders.pop()
        with os.scandir(os.path.join(root, here)) as entries:
            for entry in entries:
                path = os.path.join(here, entry.name)
                if entry.is_dir():
                    if entry.name != "__pycache__" and not entry.is_symlink():
                        folders.append(path)
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    found.append((path, stat.st_size, stat.st_mtime_ns))
    found.sort()
    return found


def fingerprint(files: list[tuple[str, int, int]]) -> str:
    """Each file's relative path, size and modification time (``listing``), as one digest."""
    digest = hashlib.blake2b(digest_size=16)
    for path, size, mtime_ns in files:
        digest.update(f"{path}\0{size}\0{mtime_ns}\0".encode())
    return digest.hexdigest()


def content_digest(root: Path, paths: list[str]) -> str:
    """The files' relative paths and bytes, as one SHA-256 digest."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode())
        digest.update((root / path).read_bytes())
    return digest.hexdigest()


def code_digest(root: Path = PACKAGE) -> str | None:
    """The content digest of the source under ``root``, from the cache when its key holds
    (``None``: no source found, or it cannot be read)."""
    try:
        files = listing(str(root))
        if not files:
            return None
        key = fingerprint(files)
        cache = root / "__pycache__" / CACHE_NAME
        cached = _cached(cache, key)
        if cached is not None:
            return cached
        digest = content_digest(root, [path for path, _, _ in files])
    except OSError:
        return None
    _store(cache, key, digest)
    return digest


def _cached(cache: Path, key: str) -> str | None:
    try:
        found = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("key") != key:
        return None
    digest = found.get("digest")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def _store(cache: Path, key: str, digest: str) -> None:
    try:
        cache.parent.mkdir(exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps({"key": key, "digest": digest}), encoding="utf-8")
        os.replace(partial, cache)
    except OSError:
        return
