"""The sensitivity matrix: injected error x max_model_len x indexer top-k, default validate settings.

``python tests/validate/sensitivity.py 2048 [8192]`` starts the test servers (a DCP-1 reference and
one DCP-4 server per case, each with that ``max_model_len`` and top-k), runs ``sm120kit validate
--dcp 4 --interleave 64`` with nothing else, and prints one JSON line per case: verdict, exit code,
worst max|Δ| and mean|Δ| over the checks, needles lost. The tests call :func:`measure`.
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
EXPECT = {"correct_bf16": 0, "correct_fp32": 0, "lse_base_e": 2, "interleave_1": 2,
          "dropped_rank": 2}
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
            "checks": len(checks), "summary": res.get("summary")}


def measure(mml: int, topk: int, cases: list[str], run_validate: Any,
            on_case: Any = None) -> dict[str, Any]:
    """{case: summary} for one (max_model_len, top-k); ``run_validate(argv) -> (rc, json)``."""
    common = ["--max-model-len", str(mml), "--topk", str(topk)]
    ref, ref_url = start(["--dcp", "1", *common])
    out = {}
    try:
        for case in cases:
            p, url = start([*DCP4, *common, *CASES[case]])
            try:
                rc, res = run_validate(["validate", "--url", url, "--reference-url", ref_url,
                                        "--dcp", "4", "--interleave", "64", "--json"])
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


if __name__ == "__main__":
    for n in map(int, sys.argv[1:] or ["2048"]):
        for name, k in (("sparse", SPARSE_TOPK), ("dense", n)):
            measure(n, k, list(CASES), _cli, lambda case, s, n=n, name=name: print(
                json.dumps({"max_model_len": n, "topk": name, "case": case, **s}), flush=True))
