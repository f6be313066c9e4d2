"""Generate the message index shipped in ``sm120kit/diagnose/msgindex/index.sqlite``: every
message vLLM, torch.distributed and torch.cuda, FlashInfer, Ray, SGLang, TGI, transformers,
safetensors and huggingface_hub can raise or log at warning and above (Python, read with
``ast``; TGI's Rust launcher/router/backends with ``scripts/msgindex_rs.py``), plus the
C/C++/CUDA/NCCL/HAMi templates ``scripts/msgindex_c.py`` extracted (``scripts/msgindex-sources/c-templates.jsonl.gz``), one
template per message, deduplicated across releases (``since``/``until``), each with the category
``catalogue/index_map.toml`` gives it.

Inputs are release wheels from PyPI (``pip download --no-deps --only-binary :all:``; vLLM's sdists
need the CUDA toolchain just to report their metadata), or, for TGI (not on PyPI), the release
tags of its git mirror (``git archive``; ``$SM120KIT_GIT_MIRRORS``), unpacked into ``--cache``
(default ``$XDG_CACHE_HOME/sm120kit/msgindex-src``), read, never imported.

    python scripts/build_message_index.py                 # all inputs -> the shipped index
    python scripts/build_message_index.py --only vllm     # a quick partial run (not shipped)
    python scripts/build_message_index.py --fixture DIR --out FILE   # a fixture tree (tests)

A fixture tree holds ``<project>-<version>/`` folders of sources.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import pickle
import re
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from msgindex_common import (  # noqa: E402
    RawTemplate,
    anchor_words,
    display,
    literal_length,
    normalize_parts,
    parts_to_regex,
)
from msgindex_fetch import Source, default_cache, tree  # noqa: E402
from msgindex_py import extract_file  # noqa: E402
from msgindex_rs import RS_EXTRACTOR, extract_rust_file  # noqa: E402

from sm120kit.diagnose.msgindex import FORMAT, MIN_LITERAL, SHIPPED, version_key  # noqa: E402
from sm120kit.diagnose.msgindex.mapping import MAP_FILE, IndexMap, load_map  # noqa: E402

EXTRACTOR_VERSION = "py-4"
C_TEMPLATES = HERE / "msgindex-sources" / "c-templates.jsonl.gz"

VLLM = (
    "0.5.0 0.5.0.post1 0.5.1 0.5.2 0.5.3 0.5.3.post1 0.5.4 0.5.5 0.6.0 0.6.1 0.6.1.post1 0.6.1.post2 0.6.2 0.6.3 0.6.3.post1 0.6.4 0.6.4.post1 0.6.5 0.6.6 "
    "0.6.6.post1 0.7.0 0.7.1 0.7.2 0.7.3 0.8.0 0.8.1 0.8.2 0.8.3 0.8.4 0.8.5 0.8.5.post1 0.9.0 "
    "0.9.0.1 0.9.1 0.9.2 0.10.0 0.10.1 0.10.1.1 0.10.2 0.11.0 0.11.1 0.11.2 0.12.0 0.13.0 0.14.0 "
    "0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1 0.18.0 0.18.1 0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 "
    "0.21.0 0.22.0 0.22.1 0.23.0 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0 "
    "0.31.0 0.32.0 0.33.0 0.34.0").split()
_TRANSFORMERS = ("transformers/modeling_utils.py", "transformers/configuration_utils.py",
                 "transformers/utils/hub.py", "transformers/integrations/*.py",
                 "transformers/models/auto/*.py", "transformers/dynamic_module_utils.py",
                 "transformers/tokenization_utils_base.py", "transformers/modeling_gguf_pytorch_utils.py",
                 "transformers/quantizers/*.py", "transformers/core_model_loading.py",
                 "transformers/safetensors_conversion.py")
_RAY = ("ray/_private/*.py", "ray/_private/accelerators/*.py", "ray/util/*.py",
        "ray/util/collective/*.py", "ray/util/collective/**/*.py", "ray/dag/*.py",
        "ray/experimental/channel/*.py", "ray/experimental/*.py", "ray/exceptions.py",
        "ray/actor.py", "ray/remote_function.py", "ray/worker.py", "ray/runtime_context.py",
        "ray/_private/runtime_env/*.py", "ray/autoscaler/_private/*.py")
_HUB = ("huggingface_hub/*.py", "!huggingface_hub/inference/*", "!huggingface_hub/commands/*",
        "!huggingface_hub/cli/*", "!huggingface_hub/templates/*")
# (project, PyPI distribution or git:owner/name, versions, members kept)
INPUTS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("vllm", "vllm", tuple(VLLM), ("vllm/*.py",)),
    ("torch", "torch", ("2.5.1", "2.9.1", "2.13.0"), ("torch/distributed/*.py", "torch/cuda/*.py")),
    ("flashinfer", "flashinfer-python", ("0.2.14.post1", "0.4.1", "0.5.3", "0.6.18.post1", "0.7.4"),
     ("flashinfer/*.py", "!flashinfer/data/*", "!flashinfer/experimental/*")),
    ("ray", "ray", ("2.40.0", "2.49.2", "2.60.0"), _RAY),
    ("sglang", "sglang", ("0.4.10.post2", "0.5.23"), ("sglang/srt/*.py",)),
    ("transformers", "transformers", ("4.57.6", "5.25.0"), _TRANSFORMERS),
    ("safetensors", "safetensors", ("0.7.0",), ("safetensors/*.py",)),
    ("huggingface_hub", "huggingface_hub", ("0.24.7", "0.30.2", "0.36.2", "1.3.0", "2.5.0"), _HUB),
    # TGI's Python server is not on PyPI: its release tags in huggingface/text-generation-inference
    ("tgi", "git:huggingface/text-generation-inference", ("1.4.5", "2.0.4", "2.4.1", "3.0.2", "3.3.7"),
     ("server/text_generation_server/*.py", "launcher/src/*.rs", "router/src/*.rs",
      "backends/v2/src/*.rs", "backends/v3/src/*.rs", "backends/client/src/*.rs")),
)
SKIPPED: dict[str, str] = {}
# the kinds counted for coverage: a raise with a message, a log call at warning or above
_COUNTED_LEVELS = ("warning", "error", "critical", "fatal")


def _counted(t: RawTemplate) -> bool:
    return t.kind == "raise" or (t.kind == "log" and (t.level or "") in _COUNTED_LEVELS)


@dataclass
class Merged:
    project: str
    file: str
    line: int
    function: str
    kind: str
    exc: str | None
    level: str | None
    parts: tuple[tuple[str, str], ...]
    versions: list[str] = field(default_factory=list)


def _hash(b: bytes) -> str:
    return hashlib.sha1(b).hexdigest()


class ExtractCache:
    """Templates of one file by (path, content hash): a file unchanged between releases is
    parsed once (``<cache>/extract-<EXTRACTOR_VERSION>.pkl``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[tuple[str, str, str], list[RawTemplate]] = {}
        if path is not None and path.exists():
            try:
                self.data = pickle.loads(path.read_bytes())
            except Exception:  # a stale or broken cache is rebuilt
                self.data = {}
        self.dirty = False

    def templates(self, root: Path, rel: str, project: str, version: str) -> list[RawTemplate]:
        b = (root / rel).read_bytes()
        # a Rust file's templates also depend on the Rust extractor's version
        key = (project, f"{rel}#{RS_EXTRACTOR}" if rel.endswith(".rs") else rel, _hash(b))
        got = self.data.get(key)
        if got is None:
            read = extract_rust_file if rel.endswith(".rs") else extract_file
            got = read(root / rel, rel, project, "")
            self.data[key] = got
            self.dirty = True
        return [RawTemplate(t.project, version, t.file, t.line, t.function, t.kind, t.exc,
                            t.level, t.parts) for t in got]

    def save(self) -> None:
        if self.path is not None and self.dirty:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.data, protocol=pickle.HIGHEST_PROTOCOL))
            tmp.replace(self.path)


def extract_tree(root: Path, project: str, version: str, cache: ExtractCache) -> list[RawTemplate]:
    out: list[RawTemplate] = []
    for p in sorted([*root.rglob("*.py"), *root.rglob("*.rs")]):
        out += cache.templates(root, p.relative_to(root).as_posix(), project, version)
    return out


def load_c_templates(path: Path) -> tuple[list[RawTemplate], list[dict[str, object]]]:
    """idxc's committed C/C++/CUDA templates (a header line with its inputs, then one
    RawTemplate record a line), and the inputs they came from."""
    out: list[RawTemplate] = []
    inputs: list[dict[str, object]] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if "header" in d:
                inputs = list(d["header"].get("inputs") or [])
                continue
            out.append(RawTemplate(d["project"], d["version"], d["file"], int(d["line"]),
                                   d.get("function") or "", d["kind"], d.get("exc"),
                                   d.get("level"), tuple((k, v) for k, v in d["parts"])))
    return out, inputs


def merge(per_version: dict[str, dict[str, list[RawTemplate]]]) -> list[Merged]:
    """One record per (project, file, function, kind, exc, level, message); the line is the
    newest release's; ``versions`` in release order."""
    merged: dict[tuple[object, ...], Merged] = {}
    for project, by_ver in per_version.items():
        for ver in sorted(by_ver, key=version_key):
            for t in by_ver[ver]:
                parts = normalize_parts(t.parts)
                key = (project, t.file, t.function, t.kind, t.exc, t.level, parts)
                m = merged.get(key)
                if m is None:
                    m = merged[key] = Merged(project, t.file, t.line, t.function, t.kind, t.exc,
                                             t.level, parts)
                m.line = t.line
                if not m.versions or m.versions[-1] != ver:
                    m.versions.append(ver)
    return list(merged.values())


def is_error(m: Merged) -> bool:
    """A raise/check or error string, NCCL's WARN, a log call at error level and above (the
    templates ``index-match`` may turn into a finding: ``msgindex.Template.is_error``)."""
    return (m.kind in ("raise", "check", "error-string")
            or (m.project == "nccl" and m.kind == "warn-macro")
            or (m.level or "") in ("error", "critical", "fatal"))


def matchable(parts: tuple[tuple[str, str], ...]) -> bool:
    return literal_length(parts) >= MIN_LITERAL and bool(anchor_words(parts))


def write_index(out: Path, templates: list[Merged], meta: dict[str, object], imap: IndexMap
                ) -> dict[str, int]:
    """The sqlite index: ``templates`` rows, ``words`` (rarest anchor word -> ids), ``meta``."""
    rows = [m for m in templates if matchable(m.parts)]
    words_of = [anchor_words(m.parts) for m in rows]
    df: Counter[str] = Counter(w for ws in words_of for w in set(ws))
    lookup: dict[str, list[int]] = defaultdict(list)
    cats: Counter[str] = Counter()
    # per project, the error-level templates: with a category, "none" by a rule, "none" by default
    cover: dict[str, Counter[str]] = defaultdict(Counter)
    tmp = out.with_suffix(".tmp")
    if tmp.exists():
        tmp.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("PRAGMA page_size=4096")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID")
    db.execute("CREATE TABLE templates (id INTEGER PRIMARY KEY, project TEXT, file TEXT, "
               "line INTEGER, function TEXT, kind TEXT, exc TEXT, level TEXT, text TEXT, "
               "regex TEXT, since TEXT, until TEXT, nrel INTEGER, category TEXT, litlen INTEGER, "
               "words TEXT)")
    db.execute("CREATE TABLE words (word TEXT PRIMARY KEY, ids TEXT) WITHOUT ROWID")
    rows_sorted = sorted(zip(rows, words_of, strict=True),
                         key=lambda r: (r[0].project, r[0].file, r[0].line))
    for i, (m, ws) in enumerate(rows_sorted, start=1):
        text = display(m.parts)
        cat, how = imap.decide(m.project, m.file, m.function, m.exc, m.level, text)
        cats[cat] += 1
        if is_error(m):
            cover[m.project]["error"] += 1
            cover[m.project]["categorized" if cat != "none" else
                             "none-default" if how == "default" else "none-by-rule"] += 1
        rare = min(ws, key=lambda w: (df[w], -len(w)))
        lookup[rare].append(i)
        db.execute("INSERT INTO templates VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (i, m.project, m.file, m.line, m.function, m.kind, m.exc, m.level, text,
                    parts_to_regex(m.parts), m.versions[0], m.versions[-1], len(m.versions), cat,
                    literal_length(m.parts), " ".join(ws)))
    db.executemany("INSERT INTO words VALUES (?,?)",
                   ((w, ",".join(map(str, ids))) for w, ids in sorted(lookup.items())))
    meta = dict(meta, templates=len(rows), unmatchable=len(templates) - len(rows),
                categories=dict(sorted(cats.items())),
                coverage={p: dict(sorted(c.items())) for p, c in sorted(cover.items())})
    db.executemany("INSERT INTO meta VALUES (?,?)",
                   ((k, json.dumps(v, sort_keys=True)) for k, v in sorted(meta.items())))
    db.commit()
    db.execute("VACUUM")
    db.close()
    tmp.replace(out)
    return dict(cats)


def coverage(raw: list[RawTemplate]) -> tuple[int, int]:
    """(counted templates, of them indexed) for one release's raw templates: a raise with a
    message or a log call at warning and above; indexed = matchable (every indexed template has
    a category or an explicit "none")."""
    counted = [t for t in raw if _counted(t)]
    return len(counted), sum(1 for t in counted if matchable(normalize_parts(t.parts)))


def map_digest(path: Path = MAP_FILE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sources(only: set[str] | None) -> list[Source]:
    out = []
    for project, dist, versions, globs in INPUTS:
        if only and project not in only:
            continue
        out += [Source(project, dist, v, globs) for v in versions]
    return out


def _fixture_sources(root: Path) -> list[tuple[str, str, Path]]:
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        m = re.fullmatch(r"([a-z_]+)-(\d[\w.]*)", d.name)
        if m:
            out.append((m.group(1), m.group(2), d))
    return out


def build(trees: list[tuple[str, str, str, Path]], out: Path, cache: ExtractCache,
          c_file: Path | None, report: list[str]) -> dict[str, object]:
    """Extract every tree, merge, categorize, write; returns the metadata written."""
    per_version: dict[str, dict[str, list[RawTemplate]]] = defaultdict(dict)
    inputs: list[dict[str, object]] = []
    counts: dict[str, dict[str, int]] = {}
    for project, dist, version, root in trees:
        raw = extract_tree(root, project, version, cache)
        per_version[project][version] = raw
        print(f"extracted {project} {version}: {len(raw)} templates", file=sys.stderr, flush=True)
        n, ok = coverage(raw)
        inputs.append({"project": project, "dist": dist, "version": version,
                       "files": sum(1 for p in root.rglob("*") if p.suffix in (".py", ".rs")), "templates": len(raw),
                       "counted": n, "indexed": ok})
    cache.save()
    pending: list[str] = []
    c_inputs: list[dict[str, object]] = []
    if c_file is not None and c_file.exists():
        c_raw, c_inputs = load_c_templates(c_file)
        for t in c_raw:
            per_version[t.project].setdefault(t.version, []).append(t)
        by_rel: dict[tuple[str, str], list[RawTemplate]] = defaultdict(list)
        for t in c_raw:
            by_rel[(t.project, t.version)].append(t)
        for (proj, ver), ts in sorted(by_rel.items()):
            inputs.append({"project": proj, "dist": "c-extractor", "version": ver, "files": 0,
                           "templates": len(ts), "counted": len(ts),
                           "indexed": sum(1 for t in ts if matchable(normalize_parts(t.parts)))})
    elif c_file is not None:
        pending = ["C/C++/CUDA/NCCL/HAMi-core (scripts/msgindex_c.py output "
                   f"{c_file.relative_to(HERE.parent) if c_file.is_relative_to(HERE.parent) else c_file}"
                   " not present)"]
    merged = merge(per_version)
    releases = {p: sorted(v, key=version_key) for p, v in per_version.items()}
    for p in releases:
        for inp in inputs:
            if inp["project"] == p:
                counts.setdefault(p, {"releases": 0, "templates": 0})
        counts[p] = {"releases": len(releases[p]),
                     "templates": sum(1 for m in merged if m.project == p)}
    meta: dict[str, object] = {
        "format": FORMAT, "extractor": EXTRACTOR_VERSION, "rust_extractor": RS_EXTRACTOR,
        "map_sha256": map_digest(),
        "inputs": inputs, "c_inputs": c_inputs, "pending": pending, "skipped": SKIPPED,
        "releases": releases, "projects": counts, "generated": time.strftime("%Y-%m-%d"),
        "c_templates_sha256": (hashlib.sha256(c_file.read_bytes()).hexdigest()
                               if c_file is not None and c_file.exists() else None),
    }
    cats = write_index(out, merged, meta, load_map())
    report.append(f"wrote {out}: {sum(cats.values())} matchable templates of {len(merged)} "
                  f"merged ({out.stat().st_size / 1e6:.1f} MB)")
    report.append("categories: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    report += _coverage_lines(out)
    return meta


def _coverage_lines(out: Path) -> list[str]:
    """The per-project table of error-level templates by how the mapping judged them."""
    db = sqlite3.connect(out)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'coverage'").fetchone()
    finally:
        db.close()
    cover: dict[str, dict[str, int]] = json.loads(row[0]) if row else {}
    lines = [f"{'error-level':<16}{'templates':>10}{'category':>10}{'none(rule)':>11}"
             f"{'none(default)':>14}{'share':>8}"]
    for p, c in cover.items():
        n = c.get("error", 0)
        share = f"{100 * c.get('categorized', 0) / n:.1f}%" if n else "-"
        lines.append(f"{p:<16}{n:>10}{c.get('categorized', 0):>10}{c.get('none-by-rule', 0):>11}"
                     f"{c.get('none-default', 0):>14}{share:>8}")
    return lines


def _print_inputs(meta: dict[str, object]) -> None:
    rows = meta["inputs"]
    assert isinstance(rows, list)
    print(f"{'project':<16}{'release':<15}{'files':>6}{'templates':>10}{'counted':>9}"
          f"{'indexed':>9}{'share':>8}")
    for r in rows:
        share = f"{100 * r['indexed'] / r['counted']:.1f}%" if r["counted"] else "-"
        print(f"{r['project']:<16}{r['version']:<15}{r['files']:>6}{r['templates']:>10}"
              f"{r['counted']:>9}{r['indexed']:>9}{share:>8}")
    for p in meta.get("pending") or []:  # type: ignore[union-attr]
        print(f"pending: {p}")
    for p, why in (meta.get("skipped") or {}).items():  # type: ignore[union-attr]
        print(f"skipped {p}: {why}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="source cache (default: "
                    "$XDG_CACHE_HOME/sm120kit/msgindex-src)")
    ap.add_argument("--out", type=Path, default=None, help=f"index file (default: {SHIPPED})")
    ap.add_argument("--only", action="append", default=None, help="projects to index (partial)")
    ap.add_argument("--fixture", type=Path, default=None,
                    help="a tree of <project>-<version>/ folders instead of the PyPI inputs")
    ap.add_argument("--c-templates", type=Path, default=C_TEMPLATES,
                    help="scripts/msgindex_c.py's output (jsonl.gz of RawTemplate records)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report: list[str] = []
    if args.fixture is not None:
        trees = [(p, p, v, d) for p, v, d in _fixture_sources(args.fixture)]
        out = args.out or Path("msgindex.sqlite")
        meta = build(trees, out, ExtractCache(None), None, report)
    else:
        cache_dir = args.cache or default_cache()
        cache_dir.mkdir(parents=True, exist_ok=True)
        only = set(args.only) if args.only else None
        if only and args.out is None:
            ap.error("--only writes a partial index: give --out")
        trees = []
        for src in _sources(only):
            trees.append((src.project, src.dist, src.version, tree(src, cache_dir)))
            print(f"source {src.project} {src.version}", file=sys.stderr, flush=True)
        ec = ExtractCache(cache_dir / f"extract-{EXTRACTOR_VERSION}.pkl")
        meta = build(trees, args.out or SHIPPED, ec, None if only else args.c_templates, report)
    _print_inputs(meta)
    for line in report:
        print(line)
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
