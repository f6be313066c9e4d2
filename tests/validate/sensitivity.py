"""The sensitivity matrix: injected error x max_model_len x indexer top-k, default validate settings.

``python tests/validate/sensitivity.py [--dcp 2,4,8] [--table] 1024 2048 [8192]`` starts the test
servers (a DCP-1 reference and one DCP-N server per case, each with that ``max_model_len`` and
top-k), runs ``sm120kit validate --dcp N --interleave 64`` with nothing else, and prints one JSON
line per case: verdict, exit code, worst max|Δ| and mean|Δ| over the checks, needles lost, the
margin over the fail line (:func:`margin`) and, for a pass, how far under its pass lines it stays
(:func:`headroom`); ``--table`` prints the markdown table of
docs/validate.md at the end. The tests call :func:`measure`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SERVER = Path(__file__).with_name("fake_server.py")
DCP4 = ["--dcp", "4", "--cp-kv-cache-interleave-size", "64"]
CASES: dict[str, list[str]] = {
    "correct_bf16": [],
    "correct_fp32": ["--rank-dtype", "fp32"],
    "lse_base_e": ["--merge-base", "e"],
    "interleave_1": ["--read-interleave", "1"],
    "dropped_rank": ["--drop-rank", "3"],
}
#: exit codes: 0 pass, 3 numerically wrong (2 would be a refusal to run the comparison)
EXPECT = {"correct_bf16": 0, "correct_fp32": 0, "lse_base_e": 3, "interleave_1": 3,
          "dropped_rank": 3}
SPARSE_TOPK = 256


def start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("PORT "):
        p.kill()
        raise RuntimeError(f"test server did not start: {line!r}")
    return p, f"http://127.0.0.1:{line.split()[1]}"


def summarize(res: dict[str, Any], rc: int) -> dict[str, Any]:
    checks = res.get("checks", [])
    maxes = [c["max_abs_diff"] for c in checks if c.get("max_abs_diff") is not None]
    means = [c["mean_abs_diff"] for c in checks if c.get("mean_abs_diff") is not None]
    return {"rc": rc, "verdict": res.get("verdict", res.get("status")),
            "max_abs": max(maxes, default=None), "mean_abs": max(means, default=None),
            "needles_lost": sum(c.get("needle_found") is False for c in checks),
            "failed_checks": sum(c.get("verdict") == "fail" for c in checks),
            "checks": len(checks), "margin": margin(res), "headroom": headroom(res),
            "summary": res.get("summary")}


def headroom(res: dict[str, Any]) -> float | None:
    """How far under its pass lines a passing run stays: the smallest of pass_mean / mean|Δ|
    (over enough positions) and pass_max / max|Δ| over the checks; None unless it passed."""
    th = res.get("thresholds") or {}
    pm, px = th.get("pass_mean"), th.get("pass_max")
    if res.get("verdict") != "pass" or not pm or not px:
        return None
    ratios = []
    for c in res.get("checks", []):
        if c.get("max_abs_diff"):
            ratios.append(px / c["max_abs_diff"])
        if c.get("mean_abs_diff") and (c.get("compared_positions") or 0) >= th.get(
                "mean_min_positions", 8):
            ratios.append(pm / c["mean_abs_diff"])
    return min(ratios, default=None)


def margin(res: dict[str, Any]) -> float | None:
    """How far past its fail line the strongest failed check is: the largest of mean|Δ| /
    fail_mean (over enough positions) and max|Δ| / fail_max; ``inf`` where a discrete test (a
    lost needle the reference retrieves, a sure top-1 flip) failed it; None without a failure."""
    th = res.get("thresholds") or {}
    fm, fx = th.get("fail_mean"), th.get("fail_max")
    best: float | None = None
    for c in res.get("checks", []):
        if c.get("verdict") != "fail":
            continue
        r = 0.0
        if c.get("needle_found") is False and c.get("reference_needle_found"):
            r = float("inf")
        if fm and c.get("mean_abs_diff") is not None and (
                c.get("compared_positions") or 0) >= th.get("mean_min_positions", 8):
            r = max(r, c["mean_abs_diff"] / fm)
        if fx and c.get("max_abs_diff") is not None:
            r = max(r, c["max_abs_diff"] / fx)
        if r == 0.0 and any("top-1" in x or "diverge" in x for x in c.get("reasons", [])):
            r = float("inf")
        best = r if best is None else max(best, r)
    return best


def measure(mml: int, topk: int, cases: list[str], run_validate: Any,
            on_case: Any = None, dcp: int = 4) -> dict[str, Any]:
    """{case: summary} for one (max_model_len, top-k, DCP size);
    ``run_validate(argv) -> (rc, json)``."""
    common = ["--max-model-len", str(mml), "--topk", str(topk)]
    ref, ref_url = start(["--dcp", "1", *common])
    out = {}
    layout = ["--dcp", str(dcp), "--cp-kv-cache-interleave-size", "64"]
    try:
        for case in cases:
            extra = CASES[case]
            if case == "dropped_rank":  # the last rank of this size
                extra = ["--drop-rank", str(dcp - 1)]
            p, url = start([*layout, *common, *extra])
            try:
                rc, res = run_validate(["validate", "--url", url, "--reference-url", ref_url,
                                        "--dcp", str(dcp), "--interleave", "64", "--json"])
                out[case] = summarize(res, rc)
                if on_case is not None:
                    on_case(case, out[case])
            finally:
                p.terminate()
                p.wait(timeout=10)
    finally:
        ref.terminate()
        ref.wait(timeout=10)
    return out


def _cli(argv: list[str]) -> tuple[int, dict[str, Any]]:
    p = subprocess.run([sys.executable, "-m", "sm120kit", *argv], capture_output=True, text=True,
                       timeout=3600)
    return p.returncode, json.loads(p.stdout)


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of docs/validate.md from the JSON lines."""
    def f(x: Any) -> str:
        if x is None:
            return ""
        if isinstance(x, float):
            return "needle/flip" if x == float("inf") else f"{x:.4g}"
        return str(x)

    out = ["| DCP | max_model_len | top-k | server | exit | verdict | worst max\\|Δ\\| | "
           "worst mean\\|Δ\\| | needles lost | checks failed | margin over the fail line | "
           "under the pass line |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["margin"]
        out.append(f"| {r['dcp']} | {r['max_model_len']} | {r['topk']} | {r['case']} | {r['rc']} | "
                   f"{r['verdict']} | {f(r['max_abs'])} | {f(r['mean_abs'])} | "
                   f"{r['needles_lost']} | {r['failed_checks']}/{r['checks']} | "
                   f"{f(m) + ('x' if m is not None and m != float('inf') else '')} | "
                   f"{'' if r.get('headroom') is None else f(r['headroom']) + 'x'} |")
    return "\n".join(out)


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("lengths", nargs="*", type=int, default=[2048])
    ap.add_argument("--dcp", default="4", help="comma-separated DCP sizes")
    ap.add_argument("--table", action="store_true", help="print the markdown table at the end")
    ap.add_argument("--cases", default=",".join(CASES))
    a = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for dcp in [int(x) for x in a.dcp.split(",")]:
        for n in a.lengths:
            for name, k in (("sparse", SPARSE_TOPK), ("dense", n)):
                def show(case: str, s: dict[str, Any], n: int = n, name: str = name,
                         dcp: int = dcp) -> None:
                    row = {"dcp": dcp, "max_model_len": n, "topk": name, "case": case, **s}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                measure(n, k, a.cases.split(","), _cli, show, dcp=dcp)
    if a.table:
        print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
