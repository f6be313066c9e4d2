"""The fast path of ``apply`` (temporary index, no worktree) against real ``git am -3``: the same
commits, byte for byte, on the real shipped series and on a test series with new files, deletions
and a rename made by ``git format-patch``; mails it does not read exactly as ``git mailinfo`` does
go to ``git am``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit.gitrun import AM_CONFIG
from sm120kit.models.series import load_series
from sm120kit.patchset.fastapply import apply_fast, read_mail
from sm120kit.patchset.patchfile import parse_patch
from tests.support.gitrepo import git, git_proc
from tests.support.paths import SM120, SPARSE_UTILS

PLAIN = {"GIT_AUTHOR_NAME": "Plain Author", "GIT_AUTHOR_EMAIL": "p@example.invalid",
         "GIT_AUTHOR_DATE": "2026-12-02T12:00:00+0130", "GIT_COMMITTER_NAME": "Plain Author",
         "GIT_COMMITTER_EMAIL": "p@example.invalid"}
ODD = {**PLAIN, "GIT_AUTHOR_NAME": "Tëst Äuthor"}


def _am(repo: Path, base: str, patches: list[Path]) -> str:
    """What the slow path does: real `git am -3` with sm120kit's committer settings."""
    git(repo, "checkout", "-q", "--detach", base)
    cfg = [a for a in AM_CONFIG if a != "-c"]
    args = [x for c in cfg for x in ("-c", c)]
    proc = git_proc(repo, *args, "am", "-3", "--keep-non-patch", "--no-gpg-sign",
                    "--committer-date-is-author-date", *map(str, patches), identity={})
    assert proc.returncode == 0, proc.stderr
    return git(repo, "rev-parse", "HEAD").strip()


def test_real_series_same_commit_as_git_am(tmp_path: Path, release34: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from sm120kit.patchset import fastapply

    variant = load_series().variants["v0.34"]
    files = [variant.patch_path(p) for p in variant.patches]
    repo = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", "--shared", str(release34), str(repo))
    base = git(repo, "rev-parse", "v0.34.0^{commit}").strip()
    refs = git(repo, "for-each-ref")
    in_process: list[object] = []
    real = fastapply._trees_here

    def spy(*a: Any) -> Any:
        in_process.append(real(*a))
        return in_process[-1]

    monkeypatch.setattr(fastapply, "_trees_here", spy)
    fast = apply_fast(repo, base, [parse_patch(f) for f in files])
    assert fast is not None
    assert in_process and in_process[0] is not None  # applied here, confirmed by git
    assert git(repo, "for-each-ref") == refs  # objects only, no ref
    assert fast == _am(repo, base, files)
    assert git_proc(repo, "fsck", "--no-dangling").returncode == 0


def test_new_deleted_renamed_files_same_commit_as_git_am(tmp_path: Path, release34: Path) -> None:
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(release34), str(work))
    base = git(work, "rev-parse", "HEAD").strip()
    (work / "vllm" / "newdir" / "deeper").mkdir(parents=True)
    (work / "vllm" / "newdir" / "deeper" / "a.py").write_text("x = 1\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "add a file in a new dir\n\nbody  \n\n\n  para",
        identity=PLAIN)
    git(work, "mv", SPARSE_UTILS, "vllm/moved_utils.py")
    (work / SM120).unlink()
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "[RFC] move one, delete one", identity=PLAIN)
    git(work, "rm", "-q", "-r", "vllm/newdir")
    git(work, "commit", "-q", "-m", "drop the new dir again", identity=PLAIN)
    out = tmp_path / "series"
    git(work, "format-patch", "-q", "-M", "--full-index", "-o", str(out), base)
    files = sorted(out.glob("*.patch"))
    assert len(files) == 3 and all(read_mail(f) is not None for f in files)
    repo = tmp_path / "target"
    git(tmp_path, "clone", "-q", "--shared", str(release34), str(repo))
    fast = apply_fast(repo, base, [parse_patch(f) for f in files])
    assert fast is not None and fast == _am(repo, base, files)
    assert git_proc(repo, "fsck", "--no-dangling").returncode == 0
    # an RFC 2047 encoded author (non-ASCII name) is left to git mailinfo
    (work / "x.txt").write_text("x\n")
    git(work, "add", "x.txt")
    git(work, "commit", "-q", "-m", "x", identity=ODD)
    (tmp_path / "enc.patch").write_text(git(work, "format-patch", "--stdout", "-1", "HEAD"))
    assert "=?UTF-8?" in (tmp_path / "enc.patch").read_text()
    assert read_mail(tmp_path / "enc.patch") is None


@pytest.mark.parametrize("header", [
    "Subject: =?UTF-8?q?caf=C3=A9?=",
    "Subject: [PATCH] Re: a reply",
    "Content-Transfer-Encoding: base64",
    "From: \"Quoted, Name\" <q@example.invalid>",
])
def test_mails_left_to_git_mailinfo(tmp_path: Path, header: str) -> None:
    key = header.split(":")[0]
    lines = ["From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
             "From: A U Thor <a@example.invalid>", "Date: Wed, 2 Dec 2026 12:00:00 +0000",
             "Subject: [PATCH] plain", "", "body", "---", " f | 1 +", ""]
    plain = tmp_path / "plain.patch"
    plain.write_text("\n".join(lines))
    mail = read_mail(plain)
    assert mail is not None and mail.message == "plain\n\nbody\n"
    assert mail.date == "1796212800 +0000"
    lines = [header if ln.startswith(key + ":") else ln for ln in lines]
    if not any(ln.startswith(key + ":") for ln in lines):
        lines.insert(3, header)
    odd = tmp_path / "odd.patch"
    odd.write_text("\n".join(lines))
    assert read_mail(odd) is None


@pytest.mark.parametrize("fmt", ["sha1", "sha256"])
def test_write_pack_stores_objects_git_reads_back(tmp_path: Path, fmt: str) -> None:
    """The pack fastapply writes (one ``git index-pack --stdin``, no directory per object) holds
    blobs, trees and commits of any size, read back byte for byte, in SHA-1 and SHA-256
    repositories; git refuses a damaged pack and nothing readable is added."""
    import hashlib

    from sm120kit.gitrun import run_git_bytes
    from sm120kit.patchset.fastapply import pack_bytes, write_pack

    repo = tmp_path / fmt
    git(tmp_path, "init", "-q", f"--object-format={fmt}", str(repo))
    algo, hexlen = (hashlib.sha1, 40) if fmt == "sha1" else (hashlib.sha256, 64)

    def oid(kind: str, body: bytes) -> str:
        return algo(kind.encode() + b" %d\0" % len(body) + body).hexdigest()

    big = bytes(range(256)) * 300  # a size that takes three bytes of the pack's varint
    blob_id = oid("blob", big)
    tree = b"100644 big.bin\0" + bytes.fromhex(blob_id)
    tree_id = oid("tree", tree)
    commit = (f"tree {tree_id}\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\n\nm\n").encode()
    objects = [("blob", big), ("tree", tree), ("commit", commit)]
    assert write_pack(repo, objects, hexlen)
    for kind, body in objects:
        assert run_git_bytes(["cat-file", kind, oid(kind, body)], repo).stdout == body
    assert "big.bin" in git(repo, "ls-tree", "-r", oid("commit", commit))
    assert git_proc(repo, "fsck", "--strict", check=False).returncode == 0
    damaged = bytearray(pack_bytes([("blob", b"other\n")], hexlen))
    damaged[-1] ^= 1
    assert run_git_bytes(["index-pack", "--stdin"], repo, input=bytes(damaged),
                         check=False).returncode != 0
    assert git_proc(repo, "cat-file", "-e", oid("blob", b"other\n"), check=False).returncode != 0
