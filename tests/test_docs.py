"""The front door and the docs: every intra-doc link and anchor resolves (README.md, docs/*.md
and the links our own code prints, e.g. a diagnose rule's fix link), the README stays a front
door (<= 200 lines, with the two set-up commands), and the generated release table is current
(it is built from patches/manifest.json by scripts/gen_docs.py, as `sm120kit targets` prints it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_LINK = re.compile(r"""["'`]((?:README\.md|docs/[\w.-]+\.md)(?:#[\w-]+)?)["'`]""")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to dashes."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(anchor(line.lstrip("#")))
    return out


def broken(target: str, base: Path) -> str | None:
    if re.match(r"^[a-z]+://|^mailto:", target):
        return None
    file, _, frag = target.partition("#")
    path = (base.parent / file).resolve() if file else base
    if not path.exists():
        return f"{target}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} " \
               "does not exist"
    if frag and path.suffix == ".md" and frag not in anchors(path):
        return f"{target}: no heading #{frag} in {path.name}"
    return None


def test_anchor_rule() -> None:
    assert anchor("Exit codes") == "exit-codes"
    assert anchor("`--json` output") == "--json-output"
    assert anchor("Installed vLLM, forks and maintainers") == "installed-vllm-forks-and-maintainers"


def test_every_doc_link_resolves() -> None:
    bad = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # links in code blocks are examples
        for target in LINK.findall(text):
            why = broken(target, doc)
            if why:
                bad.append(f"{doc.relative_to(ROOT)}: {why}")
    assert bad == []


def test_links_our_code_prints_resolve() -> None:
    """A rule's fix link like ``docs/doctor.md#kv-capacity`` (or ``README.md#...``) resolves."""
    bad, seen = [], 0
    for src in sorted((ROOT / "sm120kit").rglob("*")):
        if src.suffix not in (".py", ".toml"):
            continue
        for target in CODE_LINK.findall(src.read_text(encoding="utf-8")):
            seen += 1
            why = broken(target, ROOT / "README.md")
            if why:
                bad.append(f"{src.relative_to(ROOT)}: {why}")
    assert seen > 0 and bad == []


def test_the_check_catches_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n## Real one\n", encoding="utf-8")
    assert broken("a.md#real-one", tmp_path / "x.md") is None
    assert "no heading #apply" in (broken("a.md#apply", tmp_path / "x.md") or "")
    assert "does not exist" in (broken("b.md", tmp_path / "x.md") or "")


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for page in ("docs/apply.md", "docs/doctor.md", "docs/warmup.md", "docs/collect.md",
                 "docs/diagnose.md", "docs/validate.md", "docs/exit-codes.md", "docs/json.md",
                 "docs/releases.md", "docs/architecture.md"):
        assert f"]({page})" in text, page


def test_release_table_is_generated_from_the_manifest() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_targets_and_the_release_page_agree() -> None:
    """`sm120kit targets --json` and docs/releases.md name the same aliases, variants, statuses."""
    import json

    r = subprocess.run([sys.executable, "-m", "sm120kit", "targets", "--json"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["targets"]
    page = (ROOT / "docs" / "releases.md").read_text(encoding="utf-8")
    for row in rows:
        line = next(ln for ln in page.splitlines() if ln.startswith(f"| `{row['alias']}` |"))
        assert f"`{row['variant']}`" in line and row["status"] in line, (row, line)
