"""The shipped series itself: manifest, checksums, release coverage, patch headers, markers."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from unidiff import PatchSet

from sm120kit.errors import UserError
from sm120kit.models.series import Series, load_series
from tests.support.paths import ROOT

from .conftest import RELEASES

# The variants this directory tests (patches/ may hold more, e.g. for older releases).
VARIANTS = ("v0.30-0.31", "v0.32-0.33", "v0.34")

TOOL = ROOT / "scripts" / "series_tool.py"
HEX40 = re.compile(r"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})( \d+)?$", re.M)


def test_manifest_loads_and_checksums_match(series: Series) -> None:
    assert series.id == "sm120-dcp" and series.credits
    assert set(VARIANTS) <= set(series.variants)
    for variant in series.variants.values():
        variant.check_checksums()
        for p in variant.patches:
            data = variant.patch_path(p).read_bytes()
            assert hashlib.sha256(data).hexdigest() == p.sha256
        on_disk = sorted(x.name for x in variant.directory.glob("*.patch"))
        assert on_disk == [p.file for p in variant.patches]


def test_tampered_patch_is_refused_by_checksum(series: Series, tmp_path: Path) -> None:
    copy = tmp_path / "patches"
    shutil.copytree(series.root, copy)
    variant = load_series(copy).variant("v0.34")
    target = variant.patch_path(variant.patches[2])
    target.write_bytes(target.read_bytes().replace(b"return_valid_counts=True", b"return_valid_counts=False"))
    with pytest.raises(UserError, match="fails its checksum"):
        variant.check_checksums()
    proc = subprocess.run([sys.executable, str(TOOL), "--patches-dir", str(copy), "check"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "SHA256 MISMATCH" in proc.stdout
    ok = subprocess.run([sys.executable, str(TOOL), "check"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == "ok"


def test_every_release_covered_by_exactly_one_variant(series: Series) -> None:
    for release in RELEASES:
        owners = [v.name for v in series.variants.values() if release in v.releases]
        assert len(owners) == 1, (release, owners)
        target = series.targets[f"vllm-{release}"]
        assert target.release == release and target.base_ref == f"v{release}"
        assert target.variant == owners[0]
        assert target.status == "verified" and "git am -3" in target.verified
        assert series.alias_for_release(release) == f"vllm-{release}"
    for name in VARIANTS:
        variant = series.variant(name)
        assert variant.base_release in variant.releases
        assert set(variant.releases) <= set(RELEASES)
    assert sorted(r for n in VARIANTS for r in series.variant(n).releases) == RELEASES


def test_patch_headers_and_format(series: Series) -> None:
    for variant in map(series.variant, VARIANTS):
        for n, p in enumerate(variant.patches, start=1):
            text = variant.patch_path(p).read_text(encoding="utf-8")
            head = text.split("\n---\n", 1)[0]
            assert re.match(r"From [0-9a-f]{40} Mon Sep 17 00:00:00 2001\n", text), p.file
            assert "\nFrom: sm120kit <sm120kit@localhost>\n" in head
            assert re.search(r"^Subject: \[PATCH\] ", head, re.M)  # -N: no "n/m" numbering
            assert p.file.startswith(f"{n:04d}-")
            trailers = dict(re.findall(r"^(Origin|Upstream-Status|Applies-To): (.+)$", head, re.M))
            assert set(trailers) == {"Origin", "Upstream-Status", "Applies-To"}, p.file
            assert trailers["Applies-To"] == ", ".join(variant.releases)
            assert 'PR #60 "[eldritch] attention: support DCP in SM120 FlashInfer sparse MLA"' \
                in trailers["Origin"]
            assert "#47779" in trailers["Upstream-Status"]
            body = head.split("\n\n", 1)[1]
            assert len(body.split()) > 60, f"{p.file}: the why is missing"
            diff = PatchSet(text)
            assert sorted(f.path for f in diff) == sorted(p.files)
            assert len(HEX40.findall(text)) == len(p.files)  # --full-index blob ids
            for f in diff:
                assert f.path.startswith("vllm/") and ".." not in Path(f.path).parts


def test_markers_are_distinct_and_ours(series: Series) -> None:
    for variant in map(series.variant, VARIANTS):
        seen: set[str] = set()
        for p in variant.patches:
            assert p.applied_markers
            for m in p.applied_markers:
                assert m.text.startswith("# sm120kit: ") and m.file in p.files
                assert m.text not in seen
                seen.add(m.text)
            for m in p.upstream_markers:
                assert "sm120kit" not in m.text
    names = [[p.subject for p in series.variant(v).patches] for v in VARIANTS]
    assert all(n == names[0] for n in names)  # one logical change per patch, in every variant
