#!/usr/bin/env python3
"""Drift benchmark of the 3-way port: real release drift, synthetic fork drift, merge strategies.

(a) **real drift**: every variant ported onto every supported release it does not target (the
    release's own files as the fork), e.g. v0.32-0.33 onto 0.31.0 and 0.34.0. Reports ported or
    the conflicting definitions; a ported result is compared with the hand-made variant for that
    release: the AST (``ast.dump``, comments and layout ignored) of every definition the
    hand-made variant changes must be identical in the port.
(b) **synthetic fork drift** on each release (``tests/port/drift.py``): the release's touched
    files with one kind of drift, outside the lines the patch changes, committed in a fresh
    repository without the release blobs. Success = the port is clean, compiles, carries every
    marker (checked by the port) and keeps every probe of the drift (checked here).

Every case is merged four ways, same port engine, only the per-file merge differs:

* ``line``: ``git merge-file`` (myers), the port engine before the definition-level merge;
* ``histogram``: the same merge with ``diff-algorithm=histogram`` (``git merge-file
  --diff-algorithm`` where git has it, else ``git merge -X diff-algorithm=histogram`` in a
  scratch repository);
* ``wiggle``: Debian's ``wiggle --merge`` (word-level; skipped when not installed);
* ``definition``: ``sm120kit.patchset.defmerge.merge_file`` (line merge, then by definition).

Times: per release the anchor is plain ``git am -3`` of the series on a repository holding the
release files (median of 3); the definition port is timed end to end (``port_series`` writing
its commits and branch), printed absolute and as a ratio to the anchor.

    python scripts/bench_port.py [--releases 0.33.0,0.34.0] [--no-real] [--strategies definition]
"""

from __future__ import annotations

import argparse
import ast
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sm120kit.errors import UserError  # noqa: E402
from sm120kit.gitrun import AM_CONFIG, run_git  # noqa: E402
from sm120kit.models.series import Series, Variant, load_series  # noqa: E402
from sm120kit.patchset import release as rel  # noqa: E402
from sm120kit.patchset.defmerge import MergeOutcome, check_result, line_merge, merge_file  # noqa: E402
from sm120kit.patchset.port import port_series, series_steps  # noqa: E402
from tests.port.drift import KINDS, Drift, drift_files  # noqa: E402

Merge = Callable[..., MergeOutcome]


# ---- the alternative merges (same signature and same checks as defmerge.merge_file) -------


def _checked(text: str, n: int, ours: bytes, base: bytes, theirs: bytes, path: str,
             markers: list[str] | None) -> MergeOutcome:
    if n:
        return MergeOutcome(None, "conflict", line_conflicts=n, line_merged=text)
    o, b, t = (x.decode() for x in (ours, base, theirs))
    problems = check_result(path, b, o, t, text, markers or [])
    if problems:
        return MergeOutcome(None, "conflict", problems=problems)
    return MergeOutcome(text.encode(), "line")


def merge_line(ours: bytes, base: bytes, theirs: bytes, *, path: str,
               labels: tuple[str, str, str] = ("o", "b", "t"),
               markers: list[str] | None = None) -> MergeOutcome:
    text, n = line_merge(ours.decode(), base.decode(), theirs.decode(), labels)
    return _checked(text, n, ours, base, theirs, path, markers)


def _git_has_merge_file_algorithm() -> bool:
    proc = subprocess.run(["git", "merge-file", "-h"], capture_output=True, text=True)
    return "--diff-algorithm" in proc.stdout + proc.stderr


HAS_ALGO = _git_has_merge_file_algorithm()


def merge_histogram(ours: bytes, base: bytes, theirs: bytes, *, path: str,
                    labels: tuple[str, str, str] = ("o", "b", "t"),
                    markers: list[str] | None = None) -> MergeOutcome:
    with tempfile.TemporaryDirectory(prefix="bench-hist-") as tmp:
        t = Path(tmp)
        if HAS_ALGO:
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                (t / name).write_bytes(data)
            proc = run_git(["merge-file", "-p", "--diff3", "--diff-algorithm=histogram",
                            "ours", "base", "theirs"], t, check=False)
            return _checked(proc.stdout, proc.returncode, ours, base, theirs, path, markers)
        run_git(["init", "-q", "-b", "main"], t)
        (t / "f").write_bytes(base)
        run_git(["add", "f"], t)
        run_git(["commit", "-qm", "base"], t, config=AM_CONFIG)
        run_git(["checkout", "-qb", "theirs"], t)
        (t / "f").write_bytes(theirs)
        run_git(["commit", "-qam", "theirs"], t, config=AM_CONFIG)
        run_git(["checkout", "-q", "main"], t)
        (t / "f").write_bytes(ours)
        run_git(["commit", "-qam", "ours"], t, config=AM_CONFIG)
        proc = run_git(["merge", "-q", "--no-edit", "-X", "diff-algorithm=histogram", "theirs"],
                       t, check=False, config=AM_CONFIG)
        text = (t / "f").read_text()
        return _checked(text, 0 if proc.returncode == 0 else 1, ours, base, theirs, path,
                        markers)


def merge_wiggle(ours: bytes, base: bytes, theirs: bytes, *, path: str,
                 labels: tuple[str, str, str] = ("o", "b", "t"),
                 markers: list[str] | None = None) -> MergeOutcome:
    with tempfile.TemporaryDirectory(prefix="bench-wiggle-") as tmp:
        t = Path(tmp)
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (t / name).write_bytes(data)
        proc = subprocess.run(["wiggle", "--merge", "ours", "base", "theirs"], cwd=t,
                              capture_output=True, text=True)
        if proc.returncode > 1:
            raise SystemExit(f"wiggle failed: {proc.stderr[:300]}")
        return _checked(proc.stdout, proc.returncode, ours, base, theirs, path, markers)


STRATEGIES: dict[str, Merge] = {
    "line": merge_line, "histogram": merge_histogram, "wiggle": merge_wiggle,
    "definition": merge_file,
}


def _cached(version: str) -> bool:
    tree = rel.cache_dir() / "trees" / f"vllm-{version}"
    return (tree / ".complete").exists() or rel.find_cached_wheel("vllm", version) is not None


# ---- repositories -------------------------------------------------------------------------


def _repo(path: Path, files: dict[str, str | bytes]) -> Path:
    path.mkdir(parents=True)
    run_git(["init", "-q", "-b", "main"], path)
    for name, data in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            f.write_text(data)
        else:
            f.write_bytes(data)
    run_git(["add", "-A"], path)
    run_git(["commit", "-qm", "fork"], path, config=AM_CONFIG)
    return path


def release_files(version: str, paths: list[str]) -> dict[str, bytes]:
    tree = rel.release_tree("vllm", version)
    return {p: (tree / p).read_bytes() for p in paths if (tree / p).is_file()}


def anchor_am(tmp: Path, version: str, variant: Variant, files: dict[str, bytes],
              rounds: int = 3) -> float:
    times = []
    for i in range(rounds):
        repo = _repo(tmp / f"anchor-{version}-{i}", dict(files))
        t0 = time.perf_counter()
        run_git(["am", "-3", *[str(variant.patch_path(p)) for p in variant.patches]], repo,
                config=AM_CONFIG)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def port(repo: Path, alias: str, source: str, series: Series, merge: Merge,
         dry_run: bool) -> tuple[object, float]:
    t0 = time.perf_counter()
    res = port_series(repo, alias, "HEAD", "", source, series=series, dry_run=dry_run,
                      merge=merge, report_dir=repo.parent / f"report-{repo.name}")
    return res, time.perf_counter() - t0


# ---- (a) real drift -----------------------------------------------------------------------


def _defs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    tree = ast.parse(text)
    for n in tree.body:
        if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            out[n.name] = ast.dump(n)
            if isinstance(n, ast.ClassDef):
                for m in n.body:
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef):
                        out[f"{n.name}.{m.name}"] = ast.dump(m)
    return out


def compare_with_hand_made(version: str, hand: Variant, ported: dict[str, bytes | None]
                           ) -> list[str]:
    """Definitions the hand-made variant changes whose AST differs in the port."""
    files = release_files(version, hand.touched_files())
    made = series_steps(dict(files), hand)[-1].after
    diffs = []
    for path, data in made.items():
        if not path.endswith(".py") or data is None:
            continue
        base_defs = _defs(files[path].decode())
        hand_defs = _defs(data.decode())
        got = ported.get(path)
        port_defs = _defs(got.decode()) if got else {}
        for name, dump in hand_defs.items():
            if base_defs.get(name) != dump and port_defs.get(name) != dump:
                diffs.append(f"{path.rsplit('/', 1)[-1]}:{name}")
    return diffs


def real_drift(series: Series, tmp: Path, strategies: list[str]) -> None:
    print("\n(a) real drift: each variant ported onto the supported releases it does not target"
          " (ported= : same ASTs as the hand-made variant, ported!= : differs)")
    print(f"{'variant':<12} {'onto':<8} " + " ".join(f"{s:<10}" for s in strategies)
          + "  definition-level result vs hand-made variant")
    targets = {t.release: t for t in series.targets.values()
               if t.release and t.status == "verified"}
    for v in series.variants.values():
        for version, t in sorted(targets.items(), key=lambda kv: [int(x) for x in kv[0].split(".")]):
            if version in v.releases or not _cached(version):
                continue
            if not any(_cached(r) for r in v.releases):
                print(f"{v.name:<12} {version:<8} (no release of {v.name} cached: skipped)")
                continue
            files = release_files(version, v.touched_files())
            cells, note = [], ""
            for s in strategies:
                repo = _repo(tmp / f"real-{v.name}-{version}-{s}", dict(files))
                try:
                    res, _ = port(repo, t.alias, v.name, series, STRATEGIES[s], True)
                except UserError as exc:
                    cells.append("error")
                    note = str(exc)[:80]
                    continue
                ok = res.status == "would-port"  # type: ignore[attr-defined]
                same = ok and not compare_with_hand_made(
                    version, series.variant(t.variant), res.files)  # type: ignore[attr-defined]
                cells.append(("ported=" if same else "ported!=") if ok
                             else f"{len(res.conflicts)} confl")  # type: ignore[attr-defined]
                if s == "definition":
                    if ok:
                        hand = series.variant(t.variant)
                        d = compare_with_hand_made(version, hand, res.files)  # type: ignore[attr-defined]
                        note = "same ASTs as the hand-made variant" if not d else (
                            "differs: " + ", ".join(d[:4]) + (" ..." if len(d) > 4 else ""))
                    else:
                        defs = sorted({c.definition or f"{c.file.rsplit('/', 1)[-1]}:{c.line}"
                                       for c in res.conflicts})  # type: ignore[attr-defined]
                        note = "conflicts: " + ", ".join(defs[:5]) + (" ..." if len(defs) > 5 else "")
            print(f"{v.name:<12} {version:<8} " + " ".join(f"{c:<10}" for c in cells) + "  " + note)


# ---- (b) synthetic drift ------------------------------------------------------------------


def synthetic(series: Series, versions: list[str], kinds: list[str], tmp: Path,
              strategies: list[str]) -> None:
    print("\n(b) synthetic fork drift (outside the patch's changed lines)")
    wins: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    times: dict[str, list[float]] = defaultdict(list)
    anchors: dict[str, float] = {}
    failures: list[str] = []
    for version in versions:
        t = series.targets[f"vllm-{version}"]
        v = series.variant(t.variant)
        files = release_files(version, v.touched_files())
        patched = series_steps(dict(files), v)[-1].after
        base_s = {p: d.decode() for p, d in files.items()}
        patched_s = {p: (d or b"").decode() for p, d in patched.items()}
        anchors[version] = anchor_am(tmp, version, v, files)
        for kind in kinds:
            got = drift_files(kind, base_s, patched_s)
            if got is None:
                continue
            fork, drifts = got
            for s in strategies:
                repo = _repo(tmp / f"syn-{version}-{kind}-{s}", dict(fork))
                res, dt = port(repo, t.alias, t.alias, series, STRATEGIES[s], s != "definition")
                ok = res.status in ("ported", "would-port")  # type: ignore[attr-defined]
                lost = _lost(res, drifts) if ok else []
                ok = ok and not lost
                wins[(kind, s)][0] += ok
                wins[(kind, s)][1] += 1
                if s == "definition":
                    times[version].append(dt)
                    if not ok:
                        failures.append(f"{version} {kind}: " + (", ".join(lost) or ", ".join(
                            sorted({c.definition or c.file for c in res.conflicts}))  # type: ignore[attr-defined]
                            or "; ".join(res.problems)))  # type: ignore[attr-defined]
                shutil.rmtree(repo, ignore_errors=True)
    print(f"{'drift kind':<22} " + " ".join(f"{s:>10}" for s in strategies))
    for kind in kinds:
        cells = []
        for s in strategies:
            w, n = wins[(kind, s)]
            cells.append(f"{w}/{n}" if n else "n/a")
        print(f"{kind:<22} " + " ".join(f"{c:>10}" for c in cells))
    tot = {s: [sum(wins[(k, s)][0] for k in kinds), sum(wins[(k, s)][1] for k in kinds)]
           for s in strategies}
    print(f"{'all':<22} " + " ".join(f"{tot[s][0]:>4}/{tot[s][1]:<3} {100 * tot[s][0] / max(tot[s][1], 1):3.0f}%"
                                      for s in strategies))
    print("\nper release: definition-level port (end to end, commits + branch) vs anchor "
          "(`git am -3` of the series on the release files)")
    print(f"{'release':<8} {'anchor s':>9} {'port median s':>14} {'port max s':>11} {'ratio':>7}")
    for version in versions:
        ts = times.get(version) or [0.0]
        a = anchors[version]
        print(f"{version:<8} {a:9.3f} {statistics.median(ts):14.3f} {max(ts):11.3f} "
              f"{statistics.median(ts) / a:6.1f}x")
    worst = max((max(ts) for ts in times.values()), default=0.0)
    print(f"target < 3 s per release port: {'met' if worst < 3 else 'NOT met'} (worst {worst:.2f} s)")
    for f in failures:
        print("  failed:", f)


def _lost(res: object, drifts: dict[str, Drift]) -> list[str]:
    out = []
    for path, d in drifts.items():
        data = res.files.get(path)  # type: ignore[attr-defined]
        for item in d.kept_in(data.decode() if data else ""):
            out.append(f"{path.rsplit('/', 1)[-1]}: lost {item}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--releases", default="", help="comma-separated (default: every cached "
                    "verified release)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--strategies", default="line,histogram,wiggle,definition")
    ap.add_argument("--no-real", action="store_true", help="skip (a) real drift")
    ap.add_argument("--no-synthetic", action="store_true", help="skip (b) synthetic drift")
    args = ap.parse_args()
    series = load_series()
    strategies = [s for s in args.strategies.split(",") if s]
    if "wiggle" in strategies and shutil.which("wiggle") is None:
        print("wiggle not installed (apt-get install wiggle): skipped")
        strategies.remove("wiggle")
    versions = [r for r in args.releases.split(",") if r] or [
        t.release for t in series.targets.values()
        if t.release and t.status == "verified" and _cached(t.release)]
    print(f"git {subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.split()[-1]}"
          f"; histogram via {'merge-file --diff-algorithm' if HAS_ALGO else 'git merge -X diff-algorithm=histogram'}")
    with tempfile.TemporaryDirectory(prefix="bench-port-") as tmp:
        if not args.no_synthetic:
            synthetic(series, versions, args.kinds.split(","), Path(tmp), strategies)
        if not args.no_real:
            real_drift(series, Path(tmp), strategies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
