"""The in-process ``git apply`` of the fast path (:mod:`sm120kit.patchset.hunkapply`) against real
``git apply``: the same files after every patch of the real v0.34 series and of a
``git format-patch`` series made here (hunks at the start and end of a file, missing newlines at
the end, new and deleted files, several hunks in one file); what git would place elsewhere
(an offset), a rename, or whitespace git may be configured to fix is left to git (None)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from sm120kit.models.series import load_series
from sm120kit.patchset import hunkapply
from tests.support.gitrepo import git, git_proc

IDENT = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid",
         "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _series_both_ways(repo: Path, base: str, patches: list[Path]) -> int:
    """Apply ``patches`` with hunkapply and with ``git apply`` (in ``repo``'s work tree, at
    ``base``), comparing every touched file after every patch; how many hunkapply took (where
    git refuses a patch, hunkapply must too: ``-1 - taken``)."""
    git(repo, "checkout", "-q", "--detach", base)
    diffs = [hunkapply.parse(p.read_bytes()) for p in patches]
    paths = {fp[0] for d in diffs if d for fp in d}
    files = {p: ("100644", (repo / p).read_bytes()) for p in paths if (repo / p).exists()}
    taken = 0
    for patch, diff in zip(patches, diffs, strict=True):
        changed = hunkapply.apply(diff, files) if diff is not None else None
        if git_proc(repo, "apply", str(patch), check=False).returncode != 0:
            assert changed is None, f"{patch.name}: taken here, refused by git apply"
            return -1 - taken
        if changed is None:
            files = {p: ("100644", (repo / p).read_bytes()) for p in paths if (repo / p).exists()}
            continue
        taken += 1
        for p, now in changed.items():
            if now is None:
                files.pop(p, None)
                assert not (repo / p).exists(), p
            else:
                files[p] = now
                assert now[1] == (repo / p).read_bytes(), (patch.name, p)
    return taken


def test_real_series_as_git_applies_it(tmp_path: Path, release34: Path) -> None:
    variant = load_series().variants["v0.34"]
    files = [variant.patch_path(p) for p in variant.patches]
    repo = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", "--shared", str(release34), str(repo))
    assert _series_both_ways(repo, "v0.34.0", files) == len(files)


def _commit(work: Path, msg: str) -> None:
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", msg, identity=IDENT)


def test_edges_as_git_applies_them_and_the_rest_left_to_git(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    lines = [f"line {i}\n" for i in range(1, 40)]
    (work / "a.txt").write_bytes(b"first\nsecond\nlast without newline")
    (work / "b.txt").write_text("".join(lines))
    (work / "d.txt").write_text("to be deleted\n")
    _commit(work, "base")
    base = git(work, "rev-parse", "HEAD").strip()
    (work / "a.txt").write_bytes(b"first\nsecond\nlast changed, still without newline")
    (work / "b.txt").write_text("new top\n" + "".join(lines[1:20]) + "middle\n"
                                + "".join(lines[20:-1]) + "new bottom\n")
    _commit(work, "start, middle and end of b; a's last line")
    (work / "a.txt").write_bytes(b"first\nsecond\nlast changed, now with newline\n")
    (work / "c.txt").write_text("a new file\n")
    (work / "d.txt").unlink()
    _commit(work, "a gets its newline; c new, d gone")
    out = tmp_path / "series"
    git(work, "format-patch", "-q", "-o", str(out), base)
    patches = sorted(out.glob("*.patch"))
    assert len(patches) == 2
    target = tmp_path / "target"
    git(tmp_path, "clone", "-q", str(work), str(target))
    assert _series_both_ways(target, base, patches) == 2

    # the same hunks on a file with lines inserted above them: git finds them at an offset
    git(target, "checkout", "-q", "--detach", base)
    shifted = "extra\n" * 5 + "".join(lines)
    files = {"b.txt": ("100644", shifted.encode()),
             "a.txt": ("100644", (target / "a.txt").read_bytes()),
             "d.txt": ("100644", b"to be deleted\n")}
    diff = hunkapply.parse(patches[0].read_bytes())
    assert diff is not None and hunkapply.apply(diff, files) is None
    # a line added with a trailing blank: git may be set to fix it (apply.whitespace)
    text = patches[0].read_bytes().replace(b"+middle\n", b"+middle \n")
    diff = hunkapply.parse(text)
    assert diff is not None
    assert hunkapply.apply(diff, {"b.txt": ("100644", "".join(lines).encode()),
                                  "a.txt": files["a.txt"]}) is None
    # a rename is not read here at all
    git(work, "mv", "b.txt", "moved.txt")
    _commit(work, "rename")
    assert hunkapply.parse(git(work, "format-patch", "-M", "--stdout", "-1", "HEAD").encode()) is None


@pytest.mark.slow
def test_every_variant_on_every_cached_release() -> None:
    """Each variant on each cached release repository (``$SM120KIT_TEST_CACHE``): on its own
    releases every patch is applied here (offset hunks included) exactly as git applies it; on
    the others, a patch git refuses is refused here too."""
    from sm120kit.paths import cache_dir

    series = load_series()
    seen = 0
    for target in series.targets.values():
        src = cache_dir() / "repos" / f"vllm-{target.release}"
        if not target.release or not (src / ".git").is_dir():
            continue
        for name, variant in series.variants.items():
            files = [variant.patch_path(p) for p in variant.patches]
            with tempfile.TemporaryDirectory(prefix="sm120kit-hunk-") as td:
                repo = Path(td) / "r"
                git(Path(td), "clone", "-q", "--shared", str(src), str(repo))
                taken = _series_both_ways(repo, f"v{target.release}", files)
            if name == target.variant:
                assert taken == len(files), (target.alias, name, taken)
            seen += 1
    if not seen:
        pytest.skip("no release repository cached")
