"""Score ``sm120kit diagnose`` over labelled log corpora: one table row per corpus manifest.

    python scripts/score_corpora.py                      # the tuning corpora (see DEFAULT)
    python scripts/score_corpora.py tests/data/engine-logs/manifest.json --json

Columns, per corpus: logs; ``cause`` logs with a cause the thread establishes; top-1 / top-3
hits of that cause (rate %); ``refused``: exit 2 on a file that holds text; ``false-clear``:
outcome failure but exit 0; ``benign-1``: a healthy or progressing log answered exit 1;
``conf-wrong``: the top finding is at >= 0.8 and is not the established cause (on a benign log:
any top finding >= 0.8). A manifest entry needs ``id`` (``file`` defaults to ``<id>.txt``) and
``outcome`` (failure | healthy | progressing; the vllm-logs set's ``started``/``crashed`` are read
as healthy/failure, ``unknown`` is counted only as a log); ``established_cause.category`` when
known. The held-out sets (field-logs-holdout-3 and later) are scored only when named.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sm120kit.diagnose.engine import diagnose  # noqa: E402
from sm120kit.errors import UserError  # noqa: E402

DATA = ROOT / "tests" / "data"
DEFAULT = ("field-logs", "field-logs-b", "field-logs-c", "field-logs-d", "field-logs-e",
           "field-logs-holdout", "field-logs-holdout-2", "vllm-logs")
OUTCOME = {"started": "healthy", "crashed": "failure"}
BENIGN = ("healthy", "progressing")
COLS = ("logs", "cause", "top1", "top3", "refused", "false_clear", "benign_exit1", "conf_wrong")


def run_one(path: Path) -> dict[str, Any]:
    """diagnose one file in this process: exit code, top-3 categories and confidences."""
    try:
        res = diagnose([path])
    except UserError as exc:
        return {"exit": 2, "top": [], "conf": [], "error": exc.message}
    return {"exit": res.exit_code, "top": [f.category for f in res.findings[:3]],
            "conf": [f.confidence for f in res.findings[:3]], "state": res.state}


def _cause(e: dict[str, Any]) -> str | None:
    c = (e.get("established_cause") or {}).get("category")
    return c if c and c not in BENIGN else None


def score_entry(e: dict[str, Any], r: dict[str, Any], has_text: bool) -> dict[str, int]:
    outcome = OUTCOME.get(e.get("outcome", ""), e.get("outcome", ""))
    cause = _cause(e)
    top = r["top"][0] if r["top"] else None
    confident = bool(r["conf"]) and r["conf"][0] >= 0.8
    return {
        "logs": 1, "cause": cause is not None,
        "top1": cause is not None and top == cause,
        "top3": cause is not None and cause in r["top"],
        "refused": r["exit"] == 2 and has_text,
        "false_clear": outcome == "failure" and r["exit"] == 0,
        "benign_exit1": outcome in BENIGN and r["exit"] == 1,
        "conf_wrong": confident and ((cause is not None and top != cause) or outcome in BENIGN),
    }


def score_manifest(mf: Path, verbose: bool = False) -> dict[str, Any]:
    """The row of one corpus, plus the per-log misses (``misses``)."""
    row = dict.fromkeys(COLS, 0)
    misses = []
    for e in json.loads(mf.read_text(encoding="utf-8")):
        path = mf.parent / e.get("file", f"{e['id']}.txt")
        raw = path.read_bytes()
        r = run_one(path)
        s = score_entry(e, r, bool(raw.strip()) and b"\x00" not in raw[:4096])
        for k in COLS:
            row[k] += int(s[k])
        bad = [k for k in ("refused", "false_clear", "benign_exit1", "conf_wrong") if s[k]]
        if s["cause"] and not s["top3"]:
            bad.append("miss")
        if bad:
            misses.append({"id": e["id"], "problems": bad, "expected": _cause(e),
                           "got": r["top"], "exit": r["exit"]})
        if verbose:
            print(f"  {e['id']:<40} exit {r['exit']} expected {_cause(e)} got {r['top']}",
                  file=sys.stderr)
    return {"corpus": mf.parent.name, **row, "misses": misses}


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k // max(n, 1)} %)"


def print_table(rows: list[dict[str, Any]], misses: bool) -> None:
    head = (f"{'corpus':<22} {'logs':>5} {'cause':>6} {'top-1':>13} {'top-3':>13} {'refused':>8} "
            f"{'false-clear':>12} {'benign-1':>9} {'conf-wrong':>11}")
    print(head)
    for r in rows:
        print(f"{r['corpus']:<22} {r['logs']:>5} {r['cause']:>6} {_pct(r['top1'], r['cause']):>13} "
              f"{_pct(r['top3'], r['cause']):>13} {r['refused']:>8} {r['false_clear']:>12} "
              f"{r['benign_exit1']:>9} {r['conf_wrong']:>11}")
        for m in r["misses"] if misses else ():
            print(f"    {m['id']:<38} {','.join(m['problems']):<24} expected {m['expected']} "
                  f"got {m['got']} exit {m['exit']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("manifests", nargs="*", type=Path,
                    help="corpus manifest.json files (or their folders); default: the tuning sets")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--misses", action="store_true", help="list each log that missed")
    ap.add_argument("-v", "--verbose", action="store_true", help="one stderr line per log")
    a = ap.parse_args(argv)
    paths = [p / "manifest.json" if p.is_dir() else p for p in a.manifests] or [
        DATA / d / "manifest.json" for d in DEFAULT]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        err = f"no manifest: {', '.join(missing)}"
        print(json.dumps({"status": "error", "error": err}) if a.json else err)
        return 2
    rows = [score_manifest(p, a.verbose) for p in paths]
    total = {"corpus": "combined", **{k: sum(r[k] for r in rows) for k in COLS}, "misses": []}
    if a.json:
        print(json.dumps({"status": "ok", "corpora": rows, "combined": total}))
    else:
        print_table([*rows, total] if len(rows) > 1 else rows, a.misses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
