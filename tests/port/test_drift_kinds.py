"""Fork drift outside the patched lines ports; drift on a patched line conflicts and writes nothing.

Real parts only: the files are the real vLLM release files (cached PyPI wheel trees), the drift
is computed from the real series' changes (``tests/port/drift.py``), the forks are real git
repositories whose history lacks the release blobs, and the port writes real commits.

Per drift kind, on 0.33.0 and 0.34.0: the port (line merge, then the definition-level merge)
succeeds, the result compiles, carries every applied marker, keeps the fork's drift (probes and
order), and every definition the hand-made variant changes has the hand-made AST (the drift kinds
that add a statement inside a patched function excepted). For the kinds that defeat a plain line
merge, the same port with the line merge alone is shown to conflict, so the test can fail.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.series import load_series
from sm120kit.patchset.defmerge import MergeOutcome, check_result, cut, line_merge, merge_file
from sm120kit.patchset.port import port_series, series_steps
from sm120kit.patchset.release import release_tree
from sm120kit.patchset.snapshot import snapshot_repo_state
from tests.port.drift import KINDS, drift_files
from tests.support.forks import SM, WS, drift_unrelated, edit, git, make_fork

pytestmark = pytest.mark.network  # the 0.33.0 / 0.34.0 wheels (cached after the first run)

#: drift kinds a plain ``git merge-file`` port cannot do on these releases (measured by
#: scripts/bench_port.py; asserted below so that the definition-level merge is what ports them)
LINE_MERGE_FAILS = {"adjacent-insert", "file-banner", "reordered-defs"}


def _line_only(ours: bytes, base: bytes, theirs: bytes, *, path: str,
               labels: tuple[str, str, str] = ("o", "b", "t"),
               markers: list[str] | None = None) -> MergeOutcome:
    text, n = line_merge(ours.decode(), base.decode(), theirs.decode(), labels)
    return MergeOutcome(None if n else text.encode(), "conflict" if n else "line",
                        line_conflicts=n, line_merged=text)


def _files(version: str) -> tuple[dict[str, str], dict[str, str]]:
    series = load_series()
    variant = series.variant(series.targets[f"vllm-{version}"].variant)
    tree = release_tree("vllm", version)
    base = {p: (tree / p).read_text() for p in variant.touched_files()}
    after = series_steps({p: t.encode() for p, t in base.items()}, variant)[-1].after
    return base, {p: (d or b"").decode() for p, d in after.items()}


def _repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fork")
    return path


def _defs(text: str) -> dict[str, str]:
    """``ast.dump`` of every function and method (classes gain the fork's members)."""
    out = {}
    for n in ast.parse(text).body:
        if isinstance(n, ast.FunctionDef):
            out[n.name] = ast.dump(n)
        for m in n.body if isinstance(n, ast.ClassDef) else []:
            if isinstance(m, ast.FunctionDef):
                out[f"{n.name}.{m.name}"] = ast.dump(m)
    return out


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_drift_outside_patched_lines_ports(kind: str, version: str, tmp_path: Path) -> None:
    base, patched = _files(version)
    got = drift_files(kind, base, patched)
    assert got is not None, f"{kind}: no site in {version}'s files"
    fork, drifts = got
    alias = f"vllm-{version}"
    repo = _repo(tmp_path / "fork", fork)
    head = git(repo, "rev-parse", "HEAD").strip()

    if kind in LINE_MERGE_FAILS:
        line = port_series(repo, alias, "HEAD", "", alias, dry_run=True, merge=_line_only,
                           report_dir=tmp_path / "line-report")
        assert line.status == "conflict", kind

    res = port_series(repo, alias, "HEAD", "", alias, report_dir=tmp_path / "report")
    assert res.status == "ported", (res.problems, [(c.definition, c.reason) for c in res.conflicts])
    if kind in LINE_MERGE_FAILS:
        assert res.by_definition  # the definition-level merge did it
    tip = f"sm120kit/dcp-{alias}"
    assert git(repo, "rev-parse", "HEAD").strip() == head  # HEAD untouched, a new branch
    series = load_series()
    variant = series.variant(series.targets[alias].variant)
    for path, d in drifts.items():
        text = git(repo, "show", f"{tip}:{path}")
        compile(text, path, "exec")
        assert d.kept_in(text) == [], (path, d.kept_in(text))
    for p in variant.patches:
        for m in p.applied_markers:
            assert m.text in git(repo, "show", f"{tip}:{m.file}"), (p.file, m.text)
    if kind != "stmt-in-patched-fn":  # that drift changes patched functions on purpose
        for path in fork:
            want, mine = _defs(patched[path]), _defs(git(repo, "show", f"{tip}:{path}"))
            orig = _defs(base[path])
            changed = [n for n, dump in want.items() if orig.get(n) != dump]
            assert [n for n in changed if mine.get(n) != want[n]] == [], path


def test_edited_patch_line_conflicts_writes_nothing_reports_definition(tmp_path: Path) -> None:
    """A fork that edits a line the patch changes (plus unrelated drift the merge can do)."""

    def drift(root: Path) -> None:
        drift_unrelated(root)
        edit(root, SM, "(num_actual_toks, self.num_heads, self.kv_lora_rank)",
             "(num_actual_toks, int(self.num_heads), self.kv_lora_rank)")

    fork = make_fork(tmp_path / "fork", "0.33.0", drift)
    before = snapshot_repo_state(fork, include_files=True)
    objects = git(fork, "count-objects", "-v")
    res = port_series(fork, "vllm-0.33.0", "main", "", "vllm-0.33.0",
                      report_dir=tmp_path / "report")
    assert res.status == "conflict" and res.exit_code == 2
    (c,) = [c for c in res.conflicts if "int(self.num_heads)" in c.ours]
    assert c.file == SM and c.definition == "FlashInferMLASparseSM120Impl._run_mqa_kernel"
    for side in (c.ours, c.base, c.theirs):  # the whole definition, three ways
        assert "    def _run_mqa_kernel(" in side
    assert "int(self.num_heads)" in c.ours and "int(self.num_heads)" not in c.base + c.theirs
    assert "q.shape[1]" not in c.base
    report = (tmp_path / "report" / "report.md").read_text()
    assert "definition: `FlashInferMLASparseSM120Impl._run_mqa_kernel`" in report
    for heading in ("### target (fork) side", "### release preimage (base)",
                    "### patched release side"):
        assert heading in report
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert any(k["definition"] == c.definition for k in doc["conflicts"])
    assert snapshot_repo_state(fork, include_files=True) == before
    assert git(fork, "count-objects", "-v") == objects  # not even an object was written


def _issue_drift(root: Path) -> None:
    """The two forks of issue 14: a helper after the last patched method plus an import beside
    the patched imports; a module constant just above the workspace global the series replaces."""
    drift_unrelated(root)
    edit(root, WS, "_fi_sparse_workspace: torch.Tensor | None = None\n",
         "_FORK_WORKSPACE_CAP = 1 << 30  # fork\n"
         "_fi_sparse_workspace: torch.Tensor | None = None\n")


def test_plain_apply_ports_when_preimages_are_missing(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``apply --branch ALIAS --repo FORK --base HEAD``, no --from: the fallback ports."""
    fork = make_fork(tmp_path / "fork", "0.33.0", _issue_drift)
    head = git(fork, "rev-parse", "HEAD").strip()
    line = port_series(fork, "vllm-0.33.0", "HEAD", "", "vllm-0.33.0", dry_run=True,
                       merge=_line_only, report_dir=tmp_path / "line-report")
    assert line.status == "conflict" and {c.file for c in line.conflicts} == {WS}
    capsys.readouterr()
    rc = run(["apply", "--branch", "vllm-0.33.0", "--repo", str(fork), "--base", "HEAD", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert rc == 0, (err, doc.get("conflicts"), doc.get("problems"))
    assert doc["status"] == "ported" and doc["source"]["release"] == "0.33.0"
    assert "lacks the preimage blobs of vllm 0.33.0" in doc["note"]
    assert "--from vllm-0.33.0" in doc["note"] and "\n" not in doc["note"]
    assert doc["merged_by_definition"]  # git merge-file alone conflicts on these forks
    assert git(fork, "rev-parse", "HEAD").strip() == head
    branch = "sm120kit/dcp-vllm-0.33.0"
    ws = git(fork, "show", f"{branch}:{WS}")
    assert "_FORK_WORKSPACE_CAP = 1 << 30" in ws and "def fork_backend_note" in ws
    assert "_fork_build_tag" in git(fork, "show", f"{branch}:{SM}")
    git(fork, "checkout", "-q", branch)
    capsys.readouterr()
    rc = run(["verify", "--repo", str(fork), "--branch", "vllm-0.33.0", "--base", head, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, (out, err)


def test_no_port_flag_keeps_the_preimage_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    fork = make_fork(tmp_path / "fork", "0.33.0", _issue_drift)
    before = snapshot_repo_state(fork, include_files=True)
    capsys.readouterr()
    rc = run(["apply", "--branch", "vllm-0.33.0", "--repo", str(fork), "--base", "HEAD",
              "--no-port"])
    _, err = capsys.readouterr()
    assert rc == 2 and "preimage blobs" in err
    assert snapshot_repo_state(fork, include_files=True) == before


# ---- the merge itself, on the real release files ------------------------------------------


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_slices_rebuild_every_touched_file(version: str) -> None:
    base, patched = _files(version)
    for text in [*base.values(), *patched.values()]:
        assert "".join(i.text for i in cut(text)) == text


def test_imports_changed_by_both_merge_as_sets() -> None:
    base, patched = _files("0.33.0")
    b = base[SM]
    start = b.index("from vllm.v1.attention.backends.mla.sparse_utils import (")
    t = patched[SM]
    # the fork adds a name to the same parenthesized import the patch extends
    tail = "    triton_convert_req_index_to_global_index,\n)\n"
    assert b.count(tail) == 1 and start > 0
    o = b.replace(tail, tail[:-2] + "    flat_kv_row_view as fork_rows,\n)\n")
    assert line_merge(o, b, t)[1] > 0  # next to the patch's added name: the line merge conflicts
    got = merge_file(o.encode(), b.encode(), t.encode(), path=SM)
    assert got.merged is not None, (got.conflicts, got.problems)
    merged = got.merged.decode()
    mod = ast.parse(merged)
    names = {a.name + (f" as {a.asname}" if a.asname else "") for n in mod.body
             if isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("sparse_utils")
             for a in n.names}
    theirs = {a.name for n in ast.parse(t).body if isinstance(n, ast.ImportFrom)
              and n.module and n.module.endswith("sparse_utils") for a in n.names}
    assert "flat_kv_row_view as fork_rows" in names and theirs <= {x.split(" as ")[0] for x in names}



def test_result_checks_catch_a_merge_that_drops_the_forks_definitions(tmp_path: Path) -> None:
    """The checks run on the result: a merge that returns the patched release file (dropping the
    fork's additions) is refused, naming the lost definitions, and nothing is written."""
    base, patched = _files("0.33.0")
    fork, _ = drift_files("def-between-patched", base, patched) or ({}, {})
    repo = _repo(tmp_path / "fork", fork)
    before = snapshot_repo_state(repo, include_files=True)

    def theirs_only(ours: bytes, base: bytes, theirs: bytes, **_: object) -> MergeOutcome:
        return MergeOutcome(theirs, "line")

    res = port_series(repo, "vllm-0.33.0", "HEAD", "", "vllm-0.33.0", merge=theirs_only,
                      report_dir=tmp_path / "report")
    assert res.status == "conflict"
    assert any("fork's definition FlashInferMLASparseSM120Impl.fork_between_" in p
               for p in res.problems), res.problems
    assert snapshot_repo_state(repo, include_files=True) == before
    # and per merge: a lost marker or a lost fork definition is a problem, not a result
    b, t = base[SM], patched[SM]
    o = b.replace("\nclass ", "\ndef fork_helper() -> int:\n    return 1\n\n\nclass ", 1)
    probs = check_result(SM, b, o, t, t, ["# sm120kit: decode LSE"])
    assert any("fork_helper" in p for p in probs)
    marker = "# sm120kit: decode LSE"
    assert marker in t and check_result(SM, b, b, t, t, [marker]) == []
    (lost,) = check_result(SM, b, b, t, t.replace(marker, "#"), [marker])
    assert "marker" in lost and marker in lost


def test_a_repeated_import_added_above_does_not_shift_the_match() -> None:
    """The fork adds a second ``from ...sparse_utils import`` above the one the patch extends
    (and a helper right below it, so the line merge conflicts): matched by statement, not by
    position, the patch's extension lands in the original import and the fork's stays."""
    base, patched = _files("0.33.0")
    b, t = base[SM], patched[SM]
    head = "from vllm.v1.attention.backends.mla.sparse_utils import (\n"
    o = b.replace(head, "from vllm.v1.attention.backends.mla.sparse_utils import (  # fork\n"
                  "    flat_kv_row_view as fork_rows,\n)\n" + head, 1)
    # ... and edits the original's last name line, next to the name the patch adds
    o = o.replace("    triton_convert_req_index_to_global_index,\n)\n",
                  "    triton_convert_req_index_to_global_index,  # fork: used below\n)\n"
                  "FORK_ROWS = fork_rows\n", 1)
    assert line_merge(o, b, t)[1] > 0
    got = merge_file(o.encode(), b.encode(), t.encode(), path=SM)
    assert got.merged is not None and got.method == "definition", (got.conflicts, got.problems)
    merged = got.merged.decode()
    assert "flat_kv_row_view as fork_rows,\n)\n" in merged and "FORK_ROWS = fork_rows" in merged
    mod = ast.parse(merged)
    utils = [n for n in mod.body if isinstance(n, ast.ImportFrom)
             and (n.module or "").endswith("sparse_utils")]
    assert len(utils) == 2 and [a.asname for a in utils[0].names] == ["fork_rows"]
    assert "triton_filter_and_convert_dcp_index" in {a.name for a in utils[1].names}
    assert merged.count("triton_filter_and_convert_dcp_index") == t.count(
        "triton_filter_and_convert_dcp_index")
