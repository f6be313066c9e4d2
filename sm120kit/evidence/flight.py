"""PyTorch Flight Recorder (FR) dumps: find them, trigger NCCL on-demand dumps, make gloo dumps
analysable, and run torch's analyzer (``torch.distributed.flight_recorder.fr_trace``).

* Dump files are ``<prefix><rank>`` where the prefix comes from ``TORCH_FR_DUMP_TEMP_FILE`` /
  ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (set by ``collect`` for launched children, read from the
  target's environment for ``--attach``).
* On-demand NCCL dumps: when ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` was set, the global PG of each
  rank listens on the named pipe ``<prefix><rank>.pipe``; writing to it triggers a dump. Opened
  non-blocking, so a pipe nobody reads is skipped, never waited on.
* gloo dumps carry an empty ``pg_config`` (``{'': {..., 'ranks': '[0, 1]'}}``), which makes the
  analyzer fail with ``KeyError``; :func:`fill_pg_config` rebuilds it from the entries'
  ``process_group`` (name, desc) with the ranks that have dumps (an assumption recorded in the
  output: sub-group membership is not in the dump).
* The analyzer runs in a bounded subprocess of this interpreter (it imports torch).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import pickle
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FR_PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"


def find_dumps(prefix: str | Path) -> dict[int, Path]:
    """rank → dump file for ``<prefix><rank>`` files (pipes and temp files excluded)."""
    prefix = str(prefix)
    d = Path(os.path.dirname(prefix) or ".")
    base = os.path.basename(prefix)
    out: dict[int, Path] = {}
    try:
        entries = list(d.iterdir())
    except OSError:
        return out
    for p in entries:
        name = p.name
        if not name.startswith(base):
            continue
        m = re.fullmatch(r"(\d+)", name[len(base):])
        if not m:
            continue
        try:
            if not stat.S_ISREG(p.stat().st_mode):
                continue
        except OSError:
            continue
        out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def trigger_pipes(prefix: str | Path, *, wait_s: float = 2.0) -> list[str]:
    """Write to every ``<prefix><rank>.pipe`` that has a reader; returns the pipes triggered."""
    prefix = str(prefix)
    d = Path(os.path.dirname(prefix) or ".")
    base = os.path.basename(prefix)
    hit: list[str] = []
    try:
        cands = [p for p in d.iterdir() if p.name.startswith(base) and p.name.endswith(".pipe")]
    except OSError:
        return hit
    for p in cands:
        try:
            if not stat.S_ISFIFO(p.stat().st_mode):
                continue
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # ENXIO: nobody reading
        try:
            os.write(fd, b"1\n")
            hit.append(p.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    if hit and wait_s > 0:
        time.sleep(wait_s)
    return hit


def load_dump(path: Path) -> dict[str, Any] | None:
    """A pickled FR dump (the user's own processes wrote it); None when unreadable."""
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
    except Exception:
        return None
    return obj if isinstance(obj, dict) else None


def fill_pg_config(dump: dict[str, Any], ranks: list[int]) -> tuple[dict[str, Any], bool]:
    """A copy of ``dump`` whose ``pg_config`` names every process group seen in its entries.

    Returns (dump, changed). Groups already described keep their ranks; others get ``ranks``.
    """
    cfg = dict(dump.get("pg_config") or {})
    all_ranks = str(sorted(ranks))
    changed = False
    known_ranks = None
    blank = cfg.get("")
    if isinstance(blank, dict) and blank.get("ranks") not in (None, "[]"):
        known_ranks = str(blank.get("ranks"))
    for e in dump.get("entries", []):
        pg = e.get("process_group")
        if not pg:
            continue
        name, desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
        if name in cfg and cfg[name].get("ranks") not in (None, "[]"):
            continue
        cfg[name] = {"name": name, "desc": desc,
                     "ranks": known_ranks if (known_ranks and name == "0") else all_ranks}
        changed = True
    if changed:
        cfg.pop("", None)
    out = dict(dump)
    out["pg_config"] = cfg
    return out, changed


def summarize(dumps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Our own per-rank view: last entry per PG, pending (not retired) collectives, and which
    ranks lack an entry for a sequence number others have ("never joined")."""
    per_rank: dict[int, Any] = {}
    seqs: dict[tuple[str, int], dict[int, str]] = {}
    for rank, d in dumps.items():
        ents = d.get("entries", [])
        pend = [e for e in ents if not e.get("retired") and e.get("state") != "completed"]
        per_rank[rank] = {
            "entries": len(ents),
            "pg_status": d.get("pg_status"),
            "pending": [
                {"pg": list(e.get("process_group") or []), "seq": e.get("collective_seq_id"),
                 "op": e.get("profiling_name"), "sizes": e.get("input_sizes"),
                 "state": e.get("state")}
                for e in pend
            ],
        }
        for e in ents:
            pg = str((e.get("process_group") or ["?"])[0])
            seq = e.get("collective_seq_id")
            if isinstance(seq, int) and not e.get("is_p2p"):
                seqs.setdefault((pg, seq), {})[rank] = str(e.get("profiling_name"))
    missing = []
    ranks = set(dumps)
    for (pg, seq), have in sorted(seqs.items()):
        lack = ranks - set(have)
        if lack:
            missing.append({"pg": pg, "seq": seq, "op": sorted(set(have.values())),
                            "ranks_with": sorted(have), "missing_ranks": sorted(lack)})
        elif len(set(have.values())) > 1:
            missing.append({"pg": pg, "seq": seq, "mismatch": have})
    return {"ranks": sorted(ranks), "per_rank": per_rank, "not_joined": missing}


def analyzer_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def run_analyzer(trace_dir: Path, prefix: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """``python -m torch.distributed.flight_recorder.fr_trace`` on ``trace_dir`` (bounded)."""
    if not analyzer_available():
        return {"status": "skipped", "error": "torch is not importable here"}
    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(trace_dir),
           "-p", prefix, "--allow-incomplete-ranks"]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "cmd": cmd, "seconds": timeout}
    out = (r.stdout or "") + ("\n--- stderr ---\n" + r.stderr if r.stderr.strip() else "")
    return {"status": "ok" if r.returncode == 0 else "error", "rc": r.returncode, "cmd": cmd,
            "seconds": round(time.monotonic() - t0, 3), "output": out}


def parse_ranks(s: Any) -> list[int]:
    try:
        v = ast.literal_eval(str(s))
        return [int(x) for x in v]
    except (ValueError, SyntaxError, TypeError):
        return []
