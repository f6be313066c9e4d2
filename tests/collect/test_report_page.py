"""``sm120kit report`` and the page ``collect`` writes beside its tarball: one self-contained HTML
file (inline SVG, no script, no network) with the phase timeline per rank, the progress channels
over time, where each rank stopped and the findings with their evidence.

The fast tests read a real bundle (``tests/data/h200/bundle-warmup-stall-dcp4.tar.gz``: a DCP 4
warmup stall collected on an H200). The slow one collects a real stall (``fake_vllm_serve.py``:
real compiler processes, vLLM's log lines; only the GPU engine is a stand-in) and renders the
page in a real headless Chromium (Debian's ``chromium``): the screenshot shows the timeline's
colours and the page logs no script error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.services.htmlreport import PALETTE
from tests.support.paths import ROOT

H200 = ROOT / "tests" / "data" / "h200" / "bundle-warmup-stall-dcp4.tar.gz"
FAKE = ROOT / "tests" / "collect" / "fake_vllm_serve.py"


def _self_contained(page: str) -> None:
    assert "<script" not in page.lower()
    # nothing fetched: no tag with src/href, no url() or @import in the CSS (the xmlns of inline
    # SVG is a name, not a load; escaped text from the bundle holds no tag)
    tags = re.findall(r"<[a-zA-Z][^>]*>", page)
    assert not [t for t in tags if re.search(r"\s(?:src|href)\s*=", t)], "external resource"
    assert not re.findall(r"url\(|@import", page)


def test_report_of_a_real_h200_stall_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    out = tmp_path / "r.html"
    assert run(["report", str(H200), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out}"
    page = out.read_text()
    _self_contained(page)
    for section in ("Phase timeline per rank", "Progress channels over time",
                    "Where each rank stopped", "Findings"):
        assert f"<h2>{section}</h2>" in page
    # the stalled rank is marked; the others wait in the collective
    stalled = re.findall(r'<tr class="stalled"><td>([^<]*)</td>', page)
    assert stalled == ["Warmup_DCP2 rank 2 (pid 1970)"], stalled
    assert page.count("<code>all_reduce</code>") == 3
    # evidence lines whole (escaped, never cut)
    assert "stacks/1970.json:0  Warmup_DCP2: _sleep_forever (sm120kit/warmup/rank.py:115)" in page
    assert "collective-desync" in page


def test_report_json_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["report", str(H200), "-o", str(tmp_path / "a.html"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "report" and doc["exit_code"] == 0 and doc["findings"] >= 1
    assert Path(doc["report"]).is_file()
    # default place: beside the bundle, <name>.html
    local = tmp_path / H200.name
    shutil.copy(H200, local)
    assert run(["report", str(local)]) == 0
    assert (tmp_path / "bundle-warmup-stall-dcp4.html").is_file()
    capsys.readouterr()
    for bad in (tmp_path / "missing.tar.gz", FAKE):
        rc = run(["report", str(bad), "--json"])
        cap = capsys.readouterr()
        assert rc == 2, cap
        doc = json.loads(cap.out)
        assert doc["exit_code"] == 2 and doc["error"]
        assert cap.err.startswith("error: ") and "Traceback" not in cap.err


def _collect(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "sm120kit", "collect", "--stall-timeout", "5", "--no-doctor",
         "--deadline", "30", "-o", str(out), *extra, "--", sys.executable, str(FAKE), "compile",
         "--seconds", "6", "--decode-context-parallel-size", "2"],
        capture_output=True, text=True, env=env, timeout=240)


def _chromium(page: Path, png: Path) -> tuple[str, str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={png.parent / 'profile'}",
            "--window-size=1024,1200"]
    shot = subprocess.run([*base, f"--screenshot={png}", page.as_uri()], capture_output=True,
                          text=True, timeout=120)
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    return dom.stdout, shot.stderr + dom.stderr


@pytest.mark.slow
def test_collect_writes_the_page_and_chromium_draws_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _collect(out)
    assert p.returncode == 1, p.stderr[-3000:]
    tbs = sorted(out.glob("sm120kit-bundle-*.tar.gz"))
    assert len(tbs) == 1, list(out.iterdir())
    page = tbs[0].with_name(tbs[0].name.removesuffix(".tar.gz") + ".html")
    # the tarball and its page; the folder is gone (--keep-dir keeps it)
    assert sorted(x.name for x in out.iterdir()) == sorted([tbs[0].name, page.name])
    assert f"report: {page}" in p.stderr
    # the stall reason is said once; no rank is named, so no "named rank" advice
    reason = re.search(r"stalled after [\d.]+s: (no output and no progress[^\n]*)", p.stderr)
    assert reason, p.stderr[-2000:]
    assert p.stderr.count(reason.group(1)) == 1, p.stderr[-3000:]
    assert "named rank" not in p.stderr
    text = page.read_text()
    _self_contained(text)
    assert '<svg id="timeline"' in text and 'data-channel="compile_cpu_s"' in text
    assert 'data-channel="output"' in text  # the shm_broadcast lines it printed while compiling

    png = tmp_path / "shot.png"
    dom, log = _chromium(page, png)
    errors = [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert errors == [], errors
    assert '<svg id="timeline"' in dom and "<rect" in dom
    from PIL import Image

    img = Image.open(png).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "blank screenshot"
    count = {c: n for n, c in colours}
    phase0 = tuple(int(PALETTE[0][i:i + 2], 16) for i in (1, 3, 5))
    assert count.get(phase0, 0) > 2000, "the timeline's first phase is not drawn"

    kept = tmp_path / "kept"
    p2 = _collect(kept, "--keep-dir")
    assert p2.returncode == 1, p2.stderr[-3000:]
    names = sorted(x.name for x in kept.iterdir())
    assert len(names) == 3 and any((kept / n).is_dir() for n in names), names


def _bundle_dir(root: Path, reason: str, line: str) -> Path:
    b = root / "sm120kit-bundle-x-20260101T000000Z"
    (b / "stacks").mkdir(parents=True)
    (b / "manifest.json").write_text(json.dumps({"collectors": [
        {"name": "stacks", "status": "ok", "seconds": 0.1, "error": None}]}))
    (b / "timeline.json").write_text(json.dumps({
        "mode": "launch", "reason": reason, "stall_kind": "silence",
        "phases": [{"phase": "weight-load", "t": 1.0, "stream": "Worker_TP0"},
                   {"phase": "weight-load", "t": 1.2, "stream": "Worker_TP1"},
                   {"phase": "cuda-graph-capture", "t": 30.0, "stream": "Worker_TP0"}]}))
    (b / "progress.json").write_text(json.dumps({"series": [
        {"t": float(t), "output": t % 5 == 0, "cpu_s": t * 0.8, "compile_cpu_s": 0.0,
         "io_read_bytes": t * 50_000_000, "gpu_used_bytes": None, "compilers": 0}
        for t in range(0, 40)]}))
    (b / "logs").mkdir()
    (b / "logs" / "child.log").write_text(line + "\n")
    return b


def test_page_escapes_what_the_bundle_says(tmp_path: Path) -> None:
    """Text from the bundle (a reason, a log line) is shown as text, never as markup: a log line
    holding ``<script>`` cannot run on the page."""
    from sm120kit.evidence.bundle_reader import BundleReader
    from sm120kit.services.htmlreport import read_view, render_html

    evil = '<script>alert(1)</script><img src=x onerror=alert(2)>'
    b = _bundle_dir(tmp_path, f"no output for 5s {evil}", f"(Worker_TP0 pid=1) ERROR {evil}")
    diagnosis = {"verdict": f"stall {evil}", "ranks": [], "findings": [
        {"category": "unknown", "confidence": 0.5, "summary": evil, "ranks": [1],
         "evidence": [{"source": "logs/child.log", "line": 1, "text": evil}], "fix": evil}]}
    with BundleReader(b) as r:
        page = render_html(read_view(r, b.name, diagnosis))
    _self_contained(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # one row per stream, the later phase of TP0 drawn from its own start, both stopped
    timeline = page[page.index('<svg id="timeline"'):]
    timeline = timeline[:timeline.index("</svg>")]
    assert re.findall(r'text-anchor="end">(Worker_TP\d)</text>', timeline) == ["Worker_TP0",
                                                                               "Worker_TP1"]
    assert timeline.count("stopped in") == 2 and "stopped in cuda-graph-capture" in timeline
    # the series: CPU as a rate (0.8 cores), IO as MB/s (50), output as ticks; no GPU samples
    assert 'data-channel="cpu_s"' in page and "max 0.8 cores" in page
    assert "max 50 MB/s" in page and 'data-channel="output"' in page
    assert 'data-channel="gpu_used_bytes"' not in page
