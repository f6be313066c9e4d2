"""Parsing real format-patch files and the path safety rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.errors import UserError
from sm120kit.patchset.patchfile import (
    check_patch_paths,
    parse_patch,
    prefixes,
    unsafe_reason,
)
from sm120kit.paths import project_root
from tests.support.miniseries import MiniSeries
from tests.support.paths import SM120, SPARSE_UTILS


def test_parse_real_series_patch(mini_series: MiniSeries) -> None:
    pp = parse_patch(mini_series.patches[1])
    assert pp.subject == "sm120: pass per-token valid counts"
    assert pp.paths() == [SM120, SPARSE_UTILS]
    fc = pp.change_for(SM120)
    assert fc is not None and len(fc.hunks) == 1
    h = fc.hunks[0]
    assert fc.hunk_at(h.source_start) == h
    assert h.describe().startswith("hunk #1 (@@ -")


def test_every_shipped_patch_parses_and_is_safe() -> None:
    patches = sorted((project_root() / "patches").glob("*/*.patch"))
    assert len(patches) >= 6  # the shipped series is part of the checkout
    for p in patches:
        pp = parse_patch(p)
        assert pp.subject and pp.files, p
        check_patch_paths([pp], {})
        assert all(f.startswith("vllm/") for f in pp.paths()), p


def test_removed_line_that_looks_like_a_header_is_not_a_path(tmp_path: Path) -> None:
    p = tmp_path / "x.patch"
    p.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@b>\nSubject: [PATCH 1/1] x\n\nrename to /etc/passwd (in the message: ignored)\n---\n"
        "diff --git a/doc.txt b/doc.txt\n"
        "index 1111111..2222222 100644\n--- a/doc.txt\n+++ b/doc.txt\n"
        "@@ -1,3 +1,3 @@\n a\n--- /etc/shadow\n+++ b/../x\n c\n"
        "-- \n2.39.5\n"
    )
    pp = parse_patch(p)
    assert pp.raw_paths == ("doc.txt",)
    check_patch_paths([pp], {})


def test_symlink_creation_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "l.patch"
    p.write_text(
        "Subject: [PATCH] link\n---\n"
        "diff --git a/vllm/link b/vllm/link\nnew file mode 120000\n"
        "index 0000000..1111111\n--- /dev/null\n+++ b/vllm/link\n@@ -0,0 +1 @@\n+/etc\n"
        "\\ No newline at end of file\n"
    )
    with pytest.raises(UserError, match="creates a symlink"):
        check_patch_paths([parse_patch(p)], {})


def test_quoted_paths_are_checked(tmp_path: Path) -> None:
    p = tmp_path / "q.patch"
    p.write_text(
        "Subject: [PATCH] q\n---\n"
        'diff --git "a/../caf\\303\\251.py" "b/../caf\\303\\251.py"\n'
        "index 1111111..2222222 100644\n"
        '--- "a/../caf\\303\\251.py"\n+++ "b/../caf\\303\\251.py"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    with pytest.raises(UserError, match="outside the tree"):
        check_patch_paths([parse_patch(p)], {})


@pytest.mark.parametrize(
    "path, ok",
    [("vllm/a.py", True), ("../a", False), ("/abs", False), ("a/./b", False), ("a/.git/x", False),
     ("a\\b", False), ("", False), ("C:/x", False), ("vllm/..py", True)],
)
def test_unsafe_reason(path: str, ok: bool) -> None:
    assert (unsafe_reason(path) is None) == ok


def test_prefixes() -> None:
    assert prefixes("a/b/c.py") == ["a", "a/b", "a/b/c.py"]


def test_symlink_prefix_in_base_is_refused(mini_series: MiniSeries) -> None:
    pp = parse_patch(mini_series.patches[0])
    with pytest.raises(UserError, match="through a symlink"):
        check_patch_paths([pp], {"vllm/v1": "120000"})
