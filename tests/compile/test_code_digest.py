"""The source digest a render snapshot names (``_compile._code_digest``): content-based, and
cached beside the bytecode under a key of each file's path, size and modification time."""

from __future__ import annotations

import json
import os
from pathlib import Path

from context_manager._compile._code_digest import CACHE_NAME, code_digest, content_digest, sources


def package(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("A = 1\n")
    (root / "sub" / "mod.py").write_text("B = 2\n")
    (root / "notes.txt").write_text("not source\n")
    return root


def test_the_digest_is_of_the_content_and_a_second_read_comes_from_the_cache(
    tmp_path: Path,
) -> None:
    root = package(tmp_path / "pkg")
    first = code_digest(root)

    cache = json.loads((root / "__pycache__" / CACHE_NAME).read_text())
    assert first == cache["digest"] == content_digest(root, ["__init__.py", "sub/mod.py"])
    assert sources(root) == ["__init__.py", "sub/mod.py"]
    (root / "__pycache__" / CACHE_NAME).write_text(json.dumps({**cache, "digest": "f" * 64}))
    assert code_digest(root) == "f" * 64  # the cache was read, not the files


def test_an_edited_file_changes_the_digest_whatever_the_cache_says(tmp_path: Path) -> None:
    root = package(tmp_path / "pkg")
    before = code_digest(root)
    mod = root / "sub" / "mod.py"
    mod.write_text("B = 3\n")  # the same size: the modification time tells
    stat = mod.stat()
    os.utime(mod, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    after = code_digest(root)

    assert after != before
    assert after == content_digest(root, sources(root))


def test_a_malformed_cache_only_costs_a_read_of_the_files(tmp_path: Path) -> None:
    root = package(tmp_path / "pkg")
    expected = content_digest(root, sources(root))
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / CACHE_NAME).write_text("{not json")

    assert code_digest(root) == expected
    assert json.loads((root / "__pycache__" / CACHE_NAME).read_text())["digest"] == expected


def test_a_folder_without_source_has_no_digest(tmp_path: Path) -> None:
    assert code_digest(tmp_path) is None


def test_a_linked_folder_and_bytecode_are_left_out_of_the_sources(tmp_path: Path) -> None:
    root = package(tmp_path / "pkg")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "stale.py").write_text("C = 3\n")
    (root / "linked").symlink_to(root / "sub", target_is_directory=True)

    assert sources(root) == ["__init__.py", "sub/mod.py"]
