"""Apply / revert / inspect the series on a pip-installed vLLM (``--installed``).

Most SM120 users run vLLM from a wheel inside a container; there is no git checkout to branch.
This module patches the installed files in place, reversibly:

1. **Locate** the ``vllm`` package of an interpreter (``--python``, default the current one) by
   running that interpreter with a tiny script that uses ``importlib.util.find_spec`` and
   ``importlib.metadata``; vLLM itself is never imported (it would pull in torch and CUDA).
2. **Check** every file the series touches: its sha256 must equal the ``RECORD`` entry of the
   installed dist-info (pip's own truth; a mismatch means someone edited the file) and, when the
   release wheel is in the cache (or RECORD cannot vouch for a file), the file of the PyPI
   release tree. A mismatch refuses with the file, expected and actual hash.
3. **Dry-run** the whole series in a scratch git repository holding copies of the touched files
   (``git am -3``, one commit per patch); nothing on disk is touched until every patch applied.
4. **Write**: back up every original file into the state directory (default
   ``<site-packages>/vllm/.sm120kit/``), write ``state.json`` (format below), then replace each
   file atomically (``os.replace`` of a sibling temp file, mode kept). Any error restores every
   original and removes what was created.

``revert`` restores the exact original bytes from the backup (hash-checked), refusing when a file
was changed after the apply unless ``force``; ``status`` re-reads the state and re-hashes the
files, so later edits and a ``pip install --force-reinstall`` are reported.

State file ``state.json`` (``"format": 1``)::

    {"tool": "sm120kit", "format": 1, "state": "applied",
     "series": "sm120-dcp", "variant": "v0.32-0.34", "alias": "vllm-0.34.0",
     "vllm_version": "0.34.0", "python": "/venv/bin/python", "python_version": "3.11.7",
     "root": "/venv/lib/python3.11/site-packages", "package_dir": ".../vllm",
     "applied_at": "2026-12-02T17:40:00Z", "sm120kit_version": "0.1.0",
     "patches": [{"file": "0001-....patch", "sha256": "...", "subject": "..."}],
     "checks": {"record": true, "release_tree": true},
     "files": [{"path": "vllm/v1/...", "original_sha256": "...", "new_sha256": "...",
                "backup": "backup/vllm/v1/...", "mode": 420, "mtime_ns": 0}]}
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sm120kit import __version__
from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import AM_CONFIG, run_git
from sm120kit.models.series import Series, Variant, load_series
from sm120kit.patchset.release import find_cached_wheel, release_tree
from sm120kit.patchset.requirement_check import check_installed
from sm120kit.patchset.requirements import FlashInferRequirement
from sm120kit.paths import cache_dir
from sm120kit.report import styled

STATE_FORMAT = 1
STATE_NAME = "state.json"
DEFAULT_STATE_SUBDIR = ".sm120kit"

# Run inside the target interpreter. It must not import vllm: find_spec of a top-level name only
# searches sys.path, and importlib.metadata reads the dist-info.
_LOCATE_SCRIPT = r"""
import json, sys, importlib.util, importlib.metadata as md
out = {"executable": sys.executable, "python_version": sys.version.split()[0],
       "origin": None, "locations": [], "version": None, "record": None, "dist_root": None}
try:
    spec = importlib.util.find_spec("vllm")
except Exception as exc:
    spec = None
    out["error"] = repr(exc)
if spec is not None:
    out["origin"] = spec.origin
    out["locations"] = list(spec.submodule_search_locations or [])
try:
    d = md.distribution("vllm")
    out["version"] = d.version
    out["dist_root"] = str(d.locate_file(""))
    for f in d.files or []:
        if f.name == "RECORD" and f.parent.name.endswith(".dist-info"):
            out["record"] = str(d.locate_file(f))
            break
except md.PackageNotFoundError:
    pass
print("SM120KIT-LOCATE " + json.dumps(out))
"""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_path(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# locating the installed package


@dataclass
class InstalledVllm:
    """Where an interpreter's vLLM lives. ``root`` is the directory holding ``vllm/``."""

    python: str
    python_version: str
    version: str
    root: Path
    package_dir: Path
    record_path: Path | None
    record: dict[str, str] = field(default_factory=dict)  # "vllm/x.py" -> sha256 hex

    def to_dict(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "python_version": self.python_version,
            "version": self.version,
            "root": str(self.root),
            "package_dir": str(self.package_dir),
            "record": str(self.record_path) if self.record_path else None,
        }


def _record_hex(value: str) -> str | None:
    algo, _, digest = value.partition("=")
    if algo != "sha256" or not digest:
        return None
    raw = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))
    return raw.hex()


def parse_record(text: str) -> dict[str, str]:
    """``RECORD`` rows → ``{path: sha256 hex}`` (rows without a sha256 are skipped)."""
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1]:
            hx = _record_hex(row[1])
            if hx:
                out[row[0].replace("\\", "/")] = hx
    return out


def locate(python: str | None = None) -> InstalledVllm:
    """Find the vLLM package of ``python`` (default: this interpreter) without importing it."""
    info = _query_python(_interpreter(python))
    if info.get("origin"):
        pkg = Path(info["origin"]).resolve().parent
    else:
        pkg = Path(info["locations"][0]).resolve()
    root = pkg.parent
    record_path = Path(info["record"]) if info.get("record") else None
    record: dict[str, str] = {}
    if record_path is not None and record_path.is_file():
        dist_root = Path(info["dist_root"]).resolve() if info.get("dist_root") else root
        if dist_root != root:
            raise UserError(
                f"vllm {info['version']} metadata ({record_path}) does not belong to the package "
                f"imported from {pkg}",
                hint="two vllm installs shadow each other; remove one (pip uninstall vllm)",
            )
        record = parse_record(record_path.read_text(encoding="utf-8", errors="replace"))
    if (root / ".git").exists() or (pkg / ".git").exists():
        raise UserError(
            f"vllm at {pkg} is a git checkout (editable install)",
            hint=f"use `sm120kit apply --repo {root}` for checkouts",
        )
    return InstalledVllm(
        python=info["executable"],
        python_version=info["python_version"],
        version=str(info["version"]),
        root=root,
        package_dir=pkg,
        record_path=record_path,
        record=record,
    )


def _interpreter(python: str | None) -> str:
    """The interpreter to ask: ``python`` found on PATH or made absolute; this one by default."""
    exe = python or sys.executable
    if python and os.sep not in python and shutil.which(python):
        exe = shutil.which(python) or python
    elif os.sep in exe:
        exe = os.path.abspath(exe)  # the probe runs in a temp dir; keep symlinks (venvs)
    if not (Path(exe).exists() or shutil.which(exe)):
        raise UserError(f"python interpreter not found: {exe}", hint="pass --python /path/to/python")
    return exe


def _query_python(exe: str) -> dict[str, Any]:
    """What ``exe`` reports about its vllm (without importing it), checked to be installed."""
    with tempfile.TemporaryDirectory(prefix="sm120kit-locate-") as cwd:
        # cwd is an empty dir so a ./vllm source checkout cannot shadow the installed package
        try:
            proc = subprocess.run(
                [exe, "-c", _LOCATE_SCRIPT], cwd=cwd, capture_output=True, text=True, timeout=60
            )
        except OSError as exc:
            raise UserError(f"cannot run {exe}: {exc}", hint="pass --python /path/to/python") from exc
        except subprocess.TimeoutExpired as exc:
            raise UserError(f"{exe} did not answer within 60 s") from exc
    line = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith("SM120KIT-LOCATE ")), None
    )
    if proc.returncode != 0 or line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{exe} could not be queried for vllm: {last}")
    info = json.loads(line.split(" ", 1)[1])
    if not info.get("origin") and not info.get("locations"):
        raise UserError(
            f"no vllm package importable by {info['executable']}",
            hint="pass --python for the interpreter that runs vLLM (e.g. /opt/venv/bin/python)",
        )
    if info.get("version") is None:
        raise UserError(
            f"vllm found at {info.get('origin') or info['locations'][0]} but it has no installed "
            "distribution metadata (a source tree on sys.path?)",
            hint="for a git checkout use `sm120kit apply --repo PATH` instead of --installed",
        )
    return info


# --------------------------------------------------------------------------------------------
# checks


@dataclass
class FileCheck:
    path: str
    actual_sha256: str | None
    record_sha256: str | None
    release_sha256: str | None
    ok: bool
    problem: str | None = None


def _release_tree_if_local(version: str) -> Path | None:
    """The cached release tree, building it only from an already cached wheel (no download)."""
    tree = cache_dir() / "trees" / f"vllm-{version}"
    if (tree / ".complete").exists():
        return tree
    if find_cached_wheel("vllm", version) is not None:
        return release_tree("vllm", version)
    return None


def check_preimage(inst: InstalledVllm, files: list[str], *, allow_download: bool) -> list[FileCheck]:
    """Hash every file against RECORD and (if available) the PyPI release tree."""
    tree = _release_tree_if_local(inst.version)
    need_tree = any(f not in inst.record for f in files)
    if tree is None and need_tree and allow_download:
        tree = release_tree("vllm", inst.version)
    out: list[FileCheck] = []
    for rel in files:
        actual = _sha256_path(inst.root / rel)
        rec = inst.record.get(rel)
        rel_hash = _sha256_path(tree / rel) if tree is not None else None
        problem = None
        if actual is None:
            problem = f"{inst.root / rel} is missing from the installed vllm {inst.version}"
        elif rec is not None and actual != rec:
            problem = (
                f"{inst.root / rel} was modified after install: sha256 {actual} but the "
                f"dist-info RECORD says {rec}"
            )
        elif tree is not None and rel_hash is None:
            problem = f"{rel} is not part of the PyPI vllm {inst.version} release"
        elif rel_hash is not None and actual != rel_hash:
            problem = (
                f"{inst.root / rel} differs from PyPI vllm {inst.version}: sha256 {actual}, "
                f"release has {rel_hash} (a custom build?)"
            )
        elif rec is None and rel_hash is None:
            problem = (
                f"{rel}: no RECORD entry and no release tree to check it against"
            )
        out.append(FileCheck(rel, actual, rec, rel_hash, problem is None, problem))
    return out


# --------------------------------------------------------------------------------------------
# dry run of the series on copies


def _git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The engine's isolated git runner (no hooks, no system config) with a fixed identity."""
    proc = run_git(args, cwd, check=False, config=AM_CONFIG)
    if check and proc.returncode != 0:
        raise UserError(f"git {args[0]} failed in {cwd}: {(proc.stderr or proc.stdout).strip()[:400]}")
    return proc


def _failed_location(output: str) -> str:
    for ln in output.splitlines():
        ln = ln.strip()
        if ln.startswith("error: patch failed:") or ln.startswith("CONFLICT"):
            return ln
    for ln in output.splitlines():
        if ln.strip().startswith("error:"):
            return ln.strip()
    return (output.strip().splitlines() or ["unknown failure"])[-1]


def apply_series_to_copies(originals: dict[str, bytes], variant: Variant) -> dict[str, bytes]:
    """Apply every patch of ``variant`` to copies of ``originals``; return the new bytes.

    A scratch git repository holds exactly the touched files; each patch is ``git am -3``'d. A
    failure raises a UserError naming the patch and the file/hunk; nothing outside the scratch
    directory is touched.
    """
    with tempfile.TemporaryDirectory(prefix="sm120kit-dry-") as tmp:
        repo = Path(tmp)
        _git(["init", "-q", "-b", "main"], repo)
        for rel, data in originals.items():
            p = repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        _git(["add", "-A"], repo)
        _git(["commit", "-q", "--no-verify", "-m", "installed files"], repo)
        for patch in variant.patches:
            proc = _git(
                ["am", "-3", "--whitespace=nowarn", str(variant.patch_path(patch))], repo, check=False
            )
            if proc.returncode != 0:
                where = _failed_location(proc.stdout + "\n" + proc.stderr)
                _git(["am", "--abort"], repo, check=False)
                raise UserError(
                    f"patch {patch.file} ({patch.subject}) does not apply to the installed files: "
                    f"{where}",
                    hint="nothing was changed; the installed vllm differs from the variant's base",
                )
        return {rel: (repo / rel).read_bytes() for rel in originals}


# --------------------------------------------------------------------------------------------
# writing, atomically


def _probe_writable(directory: Path) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".sm120kit-probe-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise UserError(
            f"cannot write to {directory}: {exc.strerror or exc}",
            hint="site-packages is read-only for this user: run as its owner, rebuild the image "
            "with the patch, or patch a writable copy (pip install --target)",
        ) from exc


def _atomic_write(path: Path, data: bytes, mode: int | None = None, mtime_ns: int | None = None) -> None:
    """Write ``data`` to a sibling temp file and move it over ``path`` (mode and, when running as
    root, owner of the file it replaces are kept)."""
    try:
        old = path.stat()
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.sm120kit-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if old is not None and os.geteuid() == 0 and (old.st_uid, old.st_gid) != (0, 0):
            os.chown(tmp, old.st_uid, old.st_gid)
        if mode is not None:
            os.chmod(tmp, mode)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def state_dir_for(inst: InstalledVllm, state_dir: str | Path | None) -> Path:
    return Path(state_dir) if state_dir else inst.package_dir / DEFAULT_STATE_SUBDIR


def read_state(sdir: Path) -> dict[str, Any] | None:
    path = sdir / STATE_NAME
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"unreadable state file {path}: {exc}") from exc
    if data.get("format") != STATE_FORMAT:
        raise UserError(f"state file {path} has unknown format {data.get('format')!r}")
    return data


@contextmanager
def _restoring(paths: dict[Path, tuple[bytes, int, int]]) -> Iterator[list[Path]]:
    """Yield a list to append replaced paths to; on error put their saved bytes back."""
    done: list[Path] = []
    try:
        yield done
    except BaseException:
        for p in reversed(done):
            data, mode, mtime = paths[p]
            try:
                _atomic_write(p, data, mode, mtime)
            except OSError:
                pass
        raise


# --------------------------------------------------------------------------------------------
# results


def _table(console: Any, title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    console.print(t)


InstalledApplyStatus = Literal["applied", "already-applied", "not-needed", "would-apply"]
InstalledState = Literal["applied", "not-applied", "modified", "reinstalled", "mixed"]


@dataclass
class InstalledApplyResult:
    status: InstalledApplyStatus
    alias: str
    variant: str
    installed: InstalledVllm
    state_dir: Path | None
    files: list[dict[str, Any]]
    checks: list[FileCheck]
    dry_run: bool = False
    message: str = ""
    #: the target's FlashInfer requirement judged on the FlashInfer installed beside vLLM
    requirement: FlashInferRequirement | None = None

    @property
    def exit_code(self) -> int:
        if self.status == "would-apply":
            return ExitCode.FINDINGS
        if self.requirement is not None and self.requirement.status == "unmet":
            return ExitCode.FINDINGS
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "installed",
            "status": self.status,
            "alias": self.alias,
            "variant": self.variant,
            "dry_run": self.dry_run,
            "installed": self.installed.to_dict(),
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "files": self.files,
            "checks": [c.__dict__ for c in self.checks],
            "message": self.message,
            "requirement": None if self.requirement is None else self.requirement.__dict__,
        }

    def render(self, console: Any) -> None:
        rows = [[f["path"], f.get("original_sha256", "")[:12], f.get("new_sha256", "")[:12]]
                for f in self.files]
        _table(console, f"vllm {self.installed.version} at {self.installed.package_dir}",
               ["file", "original", "patched"], rows)
        console.print(f"{self.status}: {self.message}")
        if self.requirement is not None:
            console.print(self.requirement.line(), markup=False)


@dataclass
class InstalledStatusResult:
    status: InstalledState
    installed: InstalledVllm
    state_dir: Path
    state: dict[str, Any] | None
    files: list[dict[str, Any]]
    patches: list[dict[str, Any]]
    message: str = ""

    @property
    def exit_code(self) -> int:
        # as ``status`` on a checkout: 0 when the series is in, 1 when it is not (yet) or the
        # files changed since; errors (no vLLM, bad state file) exit 2 through UserError
        return ExitCode.OK if self.status == "applied" else ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "installed",
            "status": self.status,
            "installed": self.installed.to_dict(),
            "state_dir": str(self.state_dir),
            "state": self.state,
            "files": self.files,
            "patches": self.patches,
            "message": self.message,
        }

    def render(self, console: Any) -> None:
        if self.files:
            _table(console, f"vllm {self.installed.version} at {self.installed.package_dir}",
                   ["file", "state"], [[f["path"], styled(f["state"])] for f in self.files])
        if self.patches:
            _table(console, "patches", ["patch", "status"],
                   [[p["file"], styled(p["status"])] for p in self.patches])
        console.print(f"{self.status}: {self.message}")


@dataclass
class InstalledRevertResult:
    status: Literal["reverted", "nothing-to-revert"]
    installed: InstalledVllm
    state_dir: Path
    files: list[dict[str, Any]]
    forced: bool = False
    message: str = ""

    @property
    def exit_code(self) -> int:
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "installed",
            "status": self.status,
            "installed": self.installed.to_dict(),
            "state_dir": str(self.state_dir),
            "files": self.files,
            "forced": self.forced,
            "message": self.message,
        }

    def render(self, console: Any) -> None:
        if self.files:
            _table(console, "restored", ["file", "before", "restored"],
                   [[f["path"], f["before"], f["restored_sha256"][:12]] for f in self.files])
        console.print(f"{self.status}: {self.message}")


# --------------------------------------------------------------------------------------------
# the three operations


def _resolve_alias(series: Series, inst: InstalledVllm, alias: str | None) -> str:
    if alias is None:
        found = series.alias_for_release(inst.version)
        if found is None:
            known = sorted(a for a, t in series.targets.items() if t.release)
            raise UserError(
                f"installed vllm {inst.version} has no matching target; known releases: "
                + ", ".join(known),
                hint="pass --branch ALIAS to pick one explicitly",
            )
        return found
    target = series.target(alias)
    if target.release is None:
        raise UserError(
            f"{alias} is a fork alias (branch {target.branch}); --installed needs a release alias",
            hint="apply fork aliases to a git checkout: sm120kit apply --branch "
            f"{alias} --repo PATH",
        )
    if target.release != inst.version:
        raise UserError(
            f"installed vllm is {inst.version} but {alias} targets {target.release}",
            hint="omit --branch to pick the alias from the installed version",
        )
    return alias


def _patch_status_by_markers(variant: Variant, root: Path) -> list[dict[str, Any]]:
    rows = []
    for p in variant.patches:
        applied = bool(p.applied_markers) and all(m.present_in(root) for m in p.applied_markers)
        upstream = bool(p.upstream_markers) and all(m.present_in(root) for m in p.upstream_markers)
        status = "applied" if applied else ("upstream" if upstream else "not-applied")
        rows.append({"file": p.file, "subject": p.subject, "status": status})
    return rows


def apply_installed(
    alias: str | None = None,
    python: str | None = None,
    state_dir: str | Path | None = None,
    dry_run: bool = False,
    *,
    series: Series | None = None,
    allow_download: bool = True,
) -> InstalledApplyResult:
    """Patch the installed vLLM (:func:`_apply_installed`), then check the FlashInfer installed
    beside it against the target's requirement (0.25.x: the pin lacks the SM120 API)."""
    series = series or load_series()
    res = _apply_installed(series, alias, python, state_dir, dry_run, allow_download)
    target = series.targets.get(res.alias)
    if target is not None:
        res.requirement = check_installed(target, [str(res.installed.root)])
    return res


def _apply_installed(series: Series, alias: str | None, python: str | None,
                     state_dir: str | Path | None, dry_run: bool,
                     allow_download: bool) -> InstalledApplyResult:
    """Patch the vLLM installed for ``python`` in place (see the module docstring)."""
    inst = locate(python)
    alias = _resolve_alias(series, inst, alias)
    target, variant = series.variant_for(alias)
    variant.check_checksums()
    files = variant.touched_files()
    sdir = state_dir_for(inst, state_dir)

    again = _recorded_apply(inst, sdir, alias, variant, dry_run, _cli_flags(python, state_dir))
    if again is not None:
        return again
    rows = _patch_status_by_markers(variant, inst.root)
    if rows and all(r["status"] == "upstream" for r in rows):
        return InstalledApplyResult(
            "not-needed", alias, variant.name, inst, None, [], [], dry_run,
            f"vllm {inst.version} already has DCP support for SM120",
        )

    checks = check_preimage(inst, files, allow_download=allow_download)
    bad = [c for c in checks if not c.ok]
    if bad:
        raise UserError(
            bad[0].problem or "preimage mismatch",
            hint="nothing was changed; reinstall vllm (pip install --force-reinstall --no-deps "
            f"vllm=={inst.version}) to get the release files back",
        )

    originals = {rel: (inst.root / rel).read_bytes() for rel in files}
    new = apply_series_to_copies(originals, variant)
    file_rows = _file_rows(inst, files, originals, new)
    if dry_run:
        return InstalledApplyResult(
            "would-apply", alias, variant.name, inst, sdir, file_rows, checks, True,
            f"all {len(variant.patches)} patches apply; nothing written (--dry-run)",
        )

    for d in sorted({(inst.root / rel).parent for rel in files}):
        _probe_writable(d)
    state_doc = _state_doc(series, variant, alias, inst, checks, file_rows)
    _write_applied(inst, sdir, file_rows, originals, new, state_doc)
    return InstalledApplyResult(
        "applied", alias, variant.name, inst, sdir, file_rows, checks, False,
        f"{len(variant.patches)} patches applied to {len(files)} files; originals backed up in "
        f"{sdir}; undo with `sm120kit revert --installed{_cli_flags(python, state_dir)}`",
    )


def _cli_flags(python: str | None, state_dir: str | Path | None) -> str:
    """The ``--python``/``--state-dir`` a follow-up command needs to address the same install."""
    out = f" --python {shlex.quote(python)}" if python else ""
    return out + (f" --state-dir {shlex.quote(str(state_dir))}" if state_dir else "")


def _recorded_apply(
    inst: InstalledVllm, sdir: Path, alias: str, variant: Variant, dry_run: bool, flags: str
) -> InstalledApplyResult | None:
    """A state file recording an apply: already applied (result), changed since (UserError), or
    stale because the files are the originals again after a reinstall (None: apply afresh)."""
    state = read_state(sdir)
    if not (state and state.get("state") == "applied"):
        return None
    hashes = {f["path"]: f for f in state["files"]}
    current = {rel: _sha256_path(inst.root / rel) for rel in hashes}
    patched_now = all(current[r] == hashes[r]["new_sha256"] for r in hashes)
    if patched_now and state.get("variant") != variant.name:
        raise UserError(
            f"vllm {inst.version} is already patched with variant {state.get('variant')} "
            f"(state in {sdir})",
            hint=f"`sm120kit revert --installed{flags}` first, then apply the other variant",
        )
    if patched_now:
        return InstalledApplyResult(
            "already-applied", alias, variant.name, inst, sdir, state["files"], [],
            dry_run, f"series {state.get('series')} already applied at {state.get('applied_at')}",
        )
    if not all(current[r] == hashes[r]["original_sha256"] for r in hashes):
        changed = [r for r in hashes if current[r] not in
                   (hashes[r]["new_sha256"], hashes[r]["original_sha256"])]
        raise UserError(
            f"{sdir / STATE_NAME} records an apply but {', '.join(changed) or 'the files'} "
            "changed since",
            hint=f"`sm120kit status --installed{flags}` shows details; "
            f"`sm120kit revert --installed{flags} --force` restores the originals",
        )
    return None


def _file_rows(inst: InstalledVllm, files: list[str], originals: dict[str, bytes],
               new: dict[str, bytes]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for rel in files:
        st = (inst.root / rel).stat()
        rows.append({
            "path": rel,
            "original_sha256": sha256_bytes(originals[rel]),
            "new_sha256": sha256_bytes(new[rel]),
            "backup": f"backup/{rel}",
            "mode": st.st_mode & 0o7777,
            "mtime_ns": st.st_mtime_ns,
        })
    return rows


def _state_doc(series: Series, variant: Variant, alias: str, inst: InstalledVllm,
               checks: list[FileCheck], file_rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tool": "sm120kit",
        "format": STATE_FORMAT,
        "state": "applying",
        "series": series.id,
        "variant": variant.name,
        "alias": alias,
        "vllm_version": inst.version,
        "python": inst.python,
        "python_version": inst.python_version,
        "root": str(inst.root),
        "package_dir": str(inst.package_dir),
        "applied_at": _now(),
        "sm120kit_version": __version__,
        "patches": [{"file": p.file, "sha256": p.sha256, "subject": p.subject}
                    for p in variant.patches],
        "checks": {"record": all(c.record_sha256 for c in checks),
                   "release_tree": all(c.release_sha256 for c in checks)},
        "files": file_rows,
    }


def _write_applied(inst: InstalledVllm, sdir: Path, file_rows: list[dict[str, Any]],
                   originals: dict[str, bytes], new: dict[str, bytes],
                   state_doc: dict[str, Any]) -> None:
    """Backups, state file, then the patched files; any failure restores every original and the
    previous state directory."""
    created_sdir = not sdir.exists()
    prev_state = (sdir / STATE_NAME).read_bytes() if (sdir / STATE_NAME).is_file() else None
    backup_existed = (sdir / "backup").exists()
    sdir_parent = sdir if sdir.exists() else sdir.parent
    if not sdir_parent.exists():
        raise UserError(f"state directory parent {sdir_parent} does not exist")
    _probe_writable(sdir_parent)

    saved = {inst.root / r["path"]: (originals[r["path"]], r["mode"], r["mtime_ns"])
             for r in file_rows}
    try:
        sdir.mkdir(parents=True, exist_ok=True)
        for r in file_rows:
            b = sdir / r["backup"]
            b.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(b, originals[r["path"]])
            if _sha256_path(b) != r["original_sha256"]:
                raise UserError(f"backup {b} does not read back identically")
        _atomic_write(sdir / STATE_NAME, _dump(state_doc))
        with _restoring(saved) as done:
            for r in file_rows:
                path = inst.root / r["path"]
                _atomic_write(path, new[r["path"]], r["mode"])
                done.append(path)
                if _sha256_path(path) != r["new_sha256"]:
                    raise UserError(f"{path} does not read back as written")
            state_doc["state"] = "applied"
            _atomic_write(sdir / STATE_NAME, _dump(state_doc))
    except BaseException as exc:
        if created_sdir:
            shutil.rmtree(sdir, ignore_errors=True)
        else:
            if not backup_existed:
                shutil.rmtree(sdir / "backup", ignore_errors=True)
            try:
                if prev_state is None:
                    (sdir / STATE_NAME).unlink(missing_ok=True)
                else:
                    _atomic_write(sdir / STATE_NAME, prev_state)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise UserError(
                f"writing {getattr(exc, 'filename', None) or sdir} failed: {exc.strerror or exc}; "
                "every original was restored"
            ) from exc
        raise


def _dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode()


def _file_state(cur: str | None, f: dict[str, Any]) -> str:
    """A patched file's sha256 ``cur`` (None: gone) against its state entry ``f``:
    applied | original | missing | modified."""
    if cur == f["new_sha256"]:
        return "applied"
    if cur == f["original_sha256"]:
        return "original"
    return "missing" if cur is None else "modified"


def _status_without_state(inst: InstalledVllm, sdir: Path,
                          series: Series | None) -> InstalledStatusResult:
    """No state file: not applied by sm120kit, or patched by something else (markers present)."""
    patches: list[dict[str, Any]] = []
    try:
        series = series or load_series()
        alias = series.alias_for_release(inst.version)
        if alias and series.targets[alias].status != "unsupported":
            patches = _patch_status_by_markers(series.variant(series.targets[alias].variant),
                                               inst.root)
    except UserError:
        patches = []
    marked = [p for p in patches if p["status"] == "applied"]
    status: InstalledState = "modified" if marked else "not-applied"
    msg = (f"no sm120kit state in {sdir}"
           + ("; but patch markers are present (patched by something else?)" if marked else ""))
    return InstalledStatusResult(status, inst, sdir, None, [], patches, msg)


def status_installed(
    python: str | None = None,
    state_dir: str | Path | None = None,
    *,
    series: Series | None = None,
) -> InstalledStatusResult:
    """Re-hash the installed files against the state file (or the markers when there is none)."""
    inst = locate(python)
    sdir = state_dir_for(inst, state_dir)
    state = read_state(sdir)
    status: InstalledState
    if state is None:
        return _status_without_state(inst, sdir, series)
    files = []
    for f in state["files"]:
        cur = _sha256_path(inst.root / f["path"])
        files.append({"path": f["path"], "state": _file_state(cur, f), "sha256": cur,
                      "original_sha256": f["original_sha256"], "new_sha256": f["new_sha256"]})
    states = {f["state"] for f in files}
    if state.get("state") != "applied":
        status, msg = "modified", f"state file says {state.get('state')!r} (an interrupted apply?)"
    elif states == {"applied"}:
        status = "applied"
        msg = f"{state['series']} ({state['variant']}) applied at {state['applied_at']}"
    elif states == {"original"}:
        status = "reinstalled"
        msg = "files are the originals again (vllm reinstalled?); the state file is stale"
    elif "modified" in states or "missing" in states:
        status = "modified"
        msg = "files changed after the apply: " + ", ".join(
            f["path"] for f in files if f["state"] in ("modified", "missing"))
    else:
        status, msg = "mixed", "some files patched, some original"
    if inst.version != state.get("vllm_version"):
        status = "reinstalled"
        msg = f"state is for vllm {state.get('vllm_version')}, installed is {inst.version}"
    return InstalledStatusResult(status, inst, sdir, state, files, [], msg)


def _revert_step(root: Path, sdir: Path, f: dict[str, Any],
                 force: bool) -> tuple[dict[str, Any], bytes, str]:
    """(state entry, original bytes from the checked backup, the file's state before:
    patched | original | modified | missing); refuses a changed file unless ``force``."""
    path = root / f["path"]
    backup = sdir / f["backup"]
    data = backup.read_bytes() if backup.is_file() else None
    if data is None or sha256_bytes(data) != f["original_sha256"]:
        raise UserError(
            f"backup {backup} is missing or damaged (expected sha256 {f['original_sha256']})",
            hint="reinstall vllm to get the original files back",
        )
    cur = _sha256_path(path)
    state = _file_state(cur, f)
    if state in ("applied", "original"):
        return f, data, "patched" if state == "applied" else state
    if not force:
        raise UserError(
            f"{path} was changed after sm120kit applied the series: sha256 {cur}, "
            f"expected {f['new_sha256']}",
            hint="nothing was restored; pass --force to overwrite it with the original",
        )
    return f, data, state


def revert_installed(
    python: str | None = None,
    state_dir: str | Path | None = None,
    force: bool = False,
) -> InstalledRevertResult:
    """Restore the exact original bytes recorded by :func:`apply_installed`."""
    inst = locate(python)
    sdir = state_dir_for(inst, state_dir)
    state = read_state(sdir)
    if state is None:
        raise UserError(
            f"no sm120kit state in {sdir}: nothing to revert",
            hint="pass the --state-dir used at apply time",
        )
    plan = [_revert_step(inst.root, sdir, f, force) for f in state["files"]]
    for d in sorted({(inst.root / f["path"]).parent for f, _, _ in plan}):
        _probe_writable(d)
    _probe_writable(sdir)
    saved = {}
    for f, _, _ in plan:
        p = inst.root / f["path"]
        if p.exists():
            st = p.stat()
            saved[p] = (p.read_bytes(), st.st_mode & 0o7777, st.st_mtime_ns)
    rows = []
    with _restoring(saved) as done:
        for f, data, before in plan:
            p = inst.root / f["path"]
            if before != "original":
                _atomic_write(p, data, f.get("mode"), f.get("mtime_ns"))
                if p in saved:
                    done.append(p)
            if _sha256_path(p) != f["original_sha256"]:
                raise UserError(f"{p} does not read back as the original")
            rows.append({"path": f["path"], "before": before,
                         "restored_sha256": f["original_sha256"]})
    # the state dir is ours: remove it so the package is byte-identical to before the apply
    if state_dir is None:
        shutil.rmtree(sdir, ignore_errors=True)
    else:
        (sdir / STATE_NAME).unlink(missing_ok=True)
        shutil.rmtree(sdir / "backup", ignore_errors=True)
    return InstalledRevertResult(
        "reverted", inst, sdir, rows, force,
        f"{len(rows)} files restored to vllm {inst.version}'s original bytes",
    )
