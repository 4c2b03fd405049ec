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
  write it changes nothing but the cost.
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
    found: list[str] = []
    for folder, children, files in os.walk(root):
        children[:] = sorted(c for c in children if c != "__pycache__")
        here = os.path.relpath(folder, root)
        found += [os.path.normpath(os.path.join(here, f)) for f in files if f.endswith(".py")]
    return sorted(found)


def fingerprint(root: Path, paths: list[str]) -> str:
    """Each file's relative path, size and modification time, as one digest."""
    digest = hashlib.blake2b(digest_size=16)
    for path in paths:
        found = os.stat(root / path)
        digest.update(f"{path}\0{found.st_size}\0{found.st_mtime_ns}\0".encode())
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
        paths = sources(root)
        if not paths:
            return None
        key = fingerprint(root, paths)
        cache = root / "__pycache__" / CACHE_NAME
        cached = _cached(cache, key)
        if cached is not None:
            return cached
        digest = content_digest(root, paths)
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
