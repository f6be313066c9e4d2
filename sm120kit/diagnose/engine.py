"""``sm120kit diagnose``: a log file, a directory of per-rank logs or a collect bundle →
``DiagnoseResult`` (versions, config, per-rank table, phase timeline, ranked findings).

Logs are streamed (memory flat in their size); bundles are read through ``evidence.bundle_reader`` (no
extraction, size caps, unsafe members skipped). Exit codes: 0 nothing wrong, 1 findings,
2 unusable input (raised as ``UserError``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from sm120kit.diagnose.catalogue import announces_long_step
from sm120kit.diagnose.catalogue import load as load_catalogue
from sm120kit.diagnose.completeness import completeness, lead
from sm120kit.diagnose.facts import BundleFacts, StackView
from sm120kit.diagnose.rules import run_rules
from sm120kit.diagnose.rules.base import Finding, RuleContext, field_phase
from sm120kit.diagnose.rules.watchdog_runs import watchdog_by_rank
from sm120kit.errors import ExitCode, UserError
from sm120kit.evidence.bundle_reader import READ_ERRORS, BundleReader, looks_like_tar
from sm120kit.evidence.kv import capacity as kv_capacity
from sm120kit.evidence.logs.analyze import LogAnalysis
from sm120kit.evidence.logs.facts import LogFacts
from sm120kit.evidence.phases import PHASE_INDEX
from sm120kit.evidence.stacks import blocking_call, parse_faulthandler
from sm120kit.facts.modelconfig import load_config
from sm120kit.report import clip_words


@dataclass
class DiagnoseResult:
    inputs: list[str]
    kind: str  # log | logs | bundle
    verdict: str
    versions: dict[str, Any]
    config: dict[str, Any]
    ranks: list[dict[str, Any]]
    phases: list[dict[str, Any]]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    stalls: dict[str, Any] = field(default_factory=dict)
    kv_capacity: dict[str, Any] | None = None
    nccl_diag: dict[str, Any] | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)  # multi-node bundles

    state: str = "unknown"  # failed | stalled | progressing | healthy | incomplete | no-evidence
    phase: str | None = None  # the field phase the (last) run was in
    runs: int = 1  # launches found in the input
    engine: str = "unknown"  # vllm | sglang | tgi | torchrun | ray | nccl-tests | unknown

    @property
    def exit_code(self) -> int:
        return ExitCode.FINDINGS if self.findings else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": "warn" if self.findings else "ok",
            "state": self.state,
            "phase": self.phase,
            "runs": self.runs,
            "engine": self.engine,
            "inputs": self.inputs,
            "kind": self.kind,
            "verdict": self.verdict,
            "versions": self.versions,
            "config": self.config,
            "ranks": self.ranks,
            "phases": self.phases,
            "findings": [f.to_dict() for f in self.findings],
            "stalls": self.stalls,
            "nodes": self.nodes,
            "sources": self.sources,
            "notes": self.notes,
            "kv_capacity": self.kv_capacity,
            "nccl_diag": self.nccl_diag,
        }


def fmt_t(t: float | None) -> str | None:
    """The sortable seconds of ``prefix._t`` back to ``MM-DD HH:MM:SS`` (no year in logs)."""
    if t is None or t < 86400 * 31:
        return None
    s = int(t)
    days, s = divmod(s, 86400)
    mon, day = divmod(days, 31)
    return f"{mon:02d}-{day:02d} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


# --- bundle facts ----------------------------------------------------------------------------
def _frame_str(f: dict[str, Any]) -> str:
    fn = f.get("short_filename") or f.get("filename") or "?"
    return f"{f.get('name', '?')} ({fn}:{f.get('line', '?')})"


def _stack_view(pid: int, body: dict[str, Any], source: str, procs: dict[str, Any],
                analysis: dict[str, Any]) -> StackView | None:
    threads = body.get("threads") if isinstance(body, dict) else None
    if not isinstance(threads, list) or not threads:
        return None
    main = next((t for t in threads if isinstance(t, dict) and t.get("thread_name") == "MainThread"),
                threads[0])
    if not isinstance(main, dict):
        return None
    frames = [f for f in main.get("frames") or [] if isinstance(f, dict)]
    i0 = procs.get(str(pid))
    info: dict[str, Any] = i0 if isinstance(i0, dict) else {}
    a0 = analysis.get(str(pid))
    an: dict[str, Any] = a0 if isinstance(a0, dict) else {}
    sv = StackView(pid=pid, source=source, frames=[_frame_str(f) for f in frames[:40]])
    sv.label = body.get("label") or info.get("label") or an.get("label")
    rank = info.get("rank", an.get("rank"))
    sv.rank = rank if isinstance(rank, int) else None
    sv.role = info.get("role") or an.get("role")
    sv.state = an.get("state")
    py = [f for f in frames if f.get("line")]
    sv.top = _frame_str(py[0]) if py else (sv.frames[0] if sv.frames else None)
    call = blocking_call(frames)
    sv.collective = call.get("collective")
    sv.sync = call.get("sync")
    if an.get("collective") and not sv.collective:
        sv.collective = str(an["collective"])
    if an.get("sync") and not sv.sync:
        sv.sync = str(an["sync"])
    nat = an.get("native_frames")
    sv.native = [str(x) for x in nat[:40]] if isinstance(nat, list) else []
    return sv


_FH_FILE = re.compile(r"VLLM_STACK_DUMP_for_(?P<kind>worker|engine)_(?P<rank>\d+)_(?P<pid>\d+)")


def _faulthandler_view(name: str, text: str, analysis: dict[str, Any]) -> StackView | None:
    """A vLLM ``--watchdog-config`` dump (faulthandler text): the last dump's thread that runs
    the worker/engine loop (else the first thread), innermost frame first."""
    m = _FH_FILE.search(name)
    if not m or not text:
        return None
    last = text.rsplit(">>> Call stack dump", 1)[-1]
    threads = [t["frames"] for t in parse_faulthandler(last)]
    if not threads:
        return None
    main = next((t for t in threads if any("busy_loop" in f["name"] or "run_engine_core" in
                                           f["name"] for f in t)), threads[0])
    body = {"label": f"{m.group('kind')} {m.group('rank')}",
            "threads": [{"thread_name": "MainThread", "frames": main}]}
    sv = _stack_view(int(m.group("pid")), body, name,
                     {m.group("pid"): {"rank": int(m.group("rank")),
                                       "role": "worker" if m.group("kind") == "worker"
                                       else "engine-core"}}, analysis)
    return sv


def load_bundle_facts(br: BundleReader) -> BundleFacts:
    """The facts of a bundle; a multi-node bundle (``collect --ray``) adds every
    ``nodes/<id>/`` folder, each stack tagged with its node."""
    bf = BundleFacts()
    man = br.read_json("manifest.json")
    if isinstance(man, dict):
        cols = man.get("collectors") or man.get("records") or []
        if isinstance(cols, list):
            bf.collectors = [c for c in cols if isinstance(c, dict)]
        ray = man.get("ray")
        nodes = ray.get("nodes") if isinstance(ray, dict) else None
        if isinstance(nodes, list):
            bf.nodes = [n for n in nodes if isinstance(n, dict)]
    bf.incomplete = completeness(man)
    _load_host(br, bf, "", None)
    for folder in node_folders(br):
        _load_host(br, bf, folder + "/", folder.split("/", 1)[1])
    return bf


def node_folders(br: BundleReader) -> list[str]:
    """``nodes/<id>`` folders of a multi-node bundle that hold a node's files."""
    return sorted({"/".join(n.split("/", 2)[:2]) for n in br.names("nodes/") if n.count("/") >= 2})


def _load_stacks(br: BundleReader, bf: BundleFacts, pre: str, node: str | None
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``processes.json`` and the first stack sample of every process under ``pre``."""
    p0 = br.read_json(pre + "processes.json")
    procs = p0 if isinstance(p0, dict) else {}
    if node is None:
        bf.processes = procs
    else:
        bf.processes.update({f"{node}:{k}": v for k, v in procs.items()})
    an = br.read_json(pre + "stacks/analysis.json")
    analysis = an.get("processes", {}) if isinstance(an, dict) else {}
    analysis = analysis if isinstance(analysis, dict) else {}
    native: dict[int, list[str]] = {}
    for name in br.names(pre + "stacks/"):
        stem = name[len(pre + "stacks/"):]
        if not stem.endswith(".json") or "/" in stem:
            continue
        pid_s = stem[:-5]
        if pid_s.endswith(".native") and pid_s[:-7].isdigit():
            native[int(pid_s[:-7])] = _native_frames(br.read_json(name))
            continue
        if not pid_s.isdigit():
            continue  # analysis.json, <pid>.2.json (second samples)
        body = br.read_json(name)
        if isinstance(body, list):  # bare py-spy --json output
            body = {"threads": body}
        if not isinstance(body, dict):
            continue
        sv = _stack_view(int(pid_s), body, name, procs, analysis)
        if sv is not None:
            sv.node = node
            bf.stacks.append(sv)
    for sv in bf.stacks:  # the whole --native sample (analysis.json keeps only its head)
        if sv.node == node and native.get(sv.pid):
            sv.native = native[sv.pid]
    return procs, analysis


def _native_frames(body: Any) -> list[str]:
    """The main thread's frames of a ``<pid>.native.json`` sample, innermost first."""
    threads = body.get("threads") if isinstance(body, dict) else body
    if not isinstance(threads, list):
        return []
    ts = [t for t in threads if isinstance(t, dict)]
    main = next((t for t in ts if t.get("thread_name") == "MainThread"), ts[0] if ts else None)
    frames = main.get("frames") if isinstance(main, dict) else None
    return [_frame_str(f) for f in frames[:60] if isinstance(f, dict)] if isinstance(
        frames, list) else []


def _load_host(br: BundleReader, bf: BundleFacts, pre: str, node: str | None) -> None:
    """One host's files under ``pre`` (``""`` for a one-host bundle)."""
    if node is not None:
        man = br.read_json(pre + "manifest.json")
        cols = man.get("collectors") if isinstance(man, dict) else None
        bf.collectors += [{**c, "name": f"{node}:{c.get('name')}"}
                          for c in cols or [] if isinstance(c, dict)]
    _procs, analysis = _load_stacks(br, bf, pre, node)
    _load_nvml_ras(br, bf, pre)
    for name in br.names(pre + "vllm-watchdog/"):
        t = br.read_text(name, cap=4 << 20)
        sv = _faulthandler_view(name, t or "", analysis)
        if sv is not None and not any(s.pid == sv.pid and s.node == node for s in bf.stacks):
            sv.node = node
            bf.stacks.append(sv)
    _load_flight(br, bf, pre)
    _load_first_json(br, bf, pre)


def _load_nvml_ras(br: BundleReader, bf: BundleFacts, pre: str) -> None:
    nv = br.read_json(pre + "nvml.json")
    if isinstance(nv, dict):
        samples = nv.get("samples")
        if not isinstance(samples, list):
            samples = [nv]
        bf.nvml += [s for s in samples if isinstance(s, dict)]
    for name in br.names(pre + "ras/"):
        if name.endswith(".txt"):
            t = br.read_text(name, cap=4 << 20)
            if t:
                bf.ras.append((name, t))
        elif name.endswith(".json"):
            j = br.read_json(name, cap=16 << 20)
            if isinstance(j, dict):
                bf.ras_json.append((name, j))


def _load_flight(br: BundleReader, bf: BundleFacts, pre: str) -> None:
    fl = br.read_json(pre + "flight/index.json")
    if isinstance(fl, dict) and (bf.flight is None or fl.get("groups")):
        bf.flight = fl
    for name in br.names(pre + "flight/"):
        if name.endswith(("analysis.txt", ".out", "-analysis.txt")):
            t = br.read_text(name, cap=4 << 20)
            if t:
                bf.flight_text.append((name, t))


def _load_first_json(br: BundleReader, bf: BundleFacts, pre: str) -> None:
    """doctor / timeline / env / stall: the first host that has one wins."""
    for attr, fname in (("doctor", "doctor.json"), ("timeline", "timeline.json"),
                        ("env", "env.json"), ("stall", "stall.json")):
        doc = br.read_json(pre + fname)
        if isinstance(doc, dict) and not getattr(bf, attr):
            setattr(bf, attr, doc)


# --- main entry ------------------------------------------------------------------------------
def _feed(an: LogAnalysis, source: str, fh: IO[bytes], notes: list[str]) -> None:
    try:
        an.feed_stream(source, fh)
    except READ_ERRORS as exc:
        notes.append(f"{source}: stopped reading ({type(exc).__name__}: {exc}); used the lines "
                     "read before")


def diagnose(paths: list[Path | str], *, config: str | Path | None = None,
             environ: Mapping[str, str] | None = None,
             catalogue: list[str | Path] | None = None) -> DiagnoseResult:
    """Analyse the inputs; raise ``UserError`` when nothing usable is in them.

    ``config``: the model's config.json (or its directory) for ``kv_capacity``; without it the
    model the log names is looked up locally (model directory, HF cache), never downloaded."""
    model_cfg = _model_config(config) if config is not None else None
    if not paths:
        raise UserError("nothing to diagnose", hint="sm120kit diagnose LOG|DIR|BUNDLE.tar.gz")
    cat = load_catalogue(catalogue or (), dict(os.environ if environ is None else environ))
    an = LogAnalysis(scanner=cat.scan_line, cues=cat.prose_cues(), advice=cat.advice)
    notes: list[str] = []
    facts: BundleFacts | None = None
    kinds: set[str] = set()
    for raw in paths:
        if str(raw) == "-":
            _feed(an, "<stdin>", sys.stdin.buffer, notes)
            kinds.add("log")
            continue
        p = Path(raw)
        if not p.exists():
            raise UserError(f"{p}: no such file or directory",
                            hint="pass a log file, a directory of logs or a collect bundle")
        if p.is_dir() or (p.is_file() and looks_like_tar(p) and not _is_plain_gz_log(p)):
            facts = _feed_archive(an, p, notes, kinds) or facts
        elif p.is_file():
            kinds.add("log")
            try:
                fh2 = _open_log(p)
            except OSError as exc:
                raise UserError(f"{p}: cannot read ({exc.strerror or exc})") from None
            with fh2:
                _feed(an, p.name, fh2, notes)
        else:
            raise UserError(f"{p}: not a regular file or directory")
    an.finish()
    total = sum(s["lines"] for s in an.sources)
    texty = [s["source"] for s in an.sources if s["lines"] and s["source"] not in an.binary_sources]
    if facts is None and (total == 0 or not texty):
        what = "is empty" if total == 0 else "is binary, not text"
        raise UserError(f"{', '.join(str(x) for x in paths)} {what}: no text evidence to read",
                        hint="pass the vLLM output (2>&1) or an excerpt of it, per-rank logs, "
                             "a pasted ticket, or a `sm120kit collect` bundle")
    kv = kv_capacity(an.kv, an.vs.config, os.environ if environ is None else environ,
                     cfg=model_cfg)
    ctx = RuleContext(logs=an, bundle=facts, kv=kv, catalogue=cat)
    findings = run_rules(ctx)
    res = _result([str(x) for x in paths], "bundle" if "bundle" in kinds else
                  ("logs" if "logs" in kinds else "log"), an, ctx.facts, facts, findings, notes)
    res.kv_capacity = kv.to_dict() if kv is not None else None
    res.nccl_diag = an.nccl_diag.to_dict() if an.nccl_diag.seen else None
    _refuse_truncated_all_clear(res)
    return res


def _feed_archive(an: LogAnalysis, p: Path, notes: list[str],
                  kinds: set[str]) -> BundleFacts | None:
    """Feed a directory or archive of logs; a collect bundle's facts when it is one."""
    facts: BundleFacts | None = None
    with BundleReader(p) as br:
        notes += [f"{p.name}: {n}" for n in br.notes]
        bundle = br.is_bundle()
        kinds.add("bundle" if bundle else "logs")
        if bundle:
            facts = load_bundle_facts(br)
            tl = facts.timeline or {}
            if tl.get("reason"):
                notes.append(f"{p.name}: collect snapshot reason: {tl.get('reason')} "
                             f"(stall kind {tl.get('stall_kind')}, phase "
                             f"{tl.get('current_phase')})")
            bad = [c for c in facts.collectors
                   if c.get("status") in ("error", "timeout")]
            for c in bad[:6]:
                notes.append(f"{p.name}: collector {c.get('name')} {c.get('status')}: "
                             f"{clip_words(str(c.get('error')), 160)}")
            notes += [f"{p.name}: {n}" for n in br.notes if f"{p.name}: {n}" not in notes]
        members = br.log_members()
        for name in members:
            try:
                fh = br.open(name)
            except READ_ERRORS as exc:
                notes.append(f"{name}: unreadable ({exc})")
                continue
            with fh:
                _feed(an, name, fh, notes)
        if bundle and not any(n.startswith("logs/") for n in members):
            _feed_tails(an, br)
        for folder in node_folders(br) if bundle else []:
            _feed_tails(an, br, folder + "/")
    return facts


def _refuse_truncated_all_clear(res: DiagnoseResult) -> None:
    """A truncated or corrupt archive whose readable part records no failure is not an
    all-clear: the part cut off may hold it (issue 23 item 6). Exit 2, the cut named."""
    if res.state not in ("healthy", "incomplete", "no-evidence"):
        return
    cut = next((n for n in res.notes if "archive is truncated or corrupt" in n), None)
    if cut is not None:
        raise UserError(f"{cut}; the readable part records no failure, which is not an all-clear "
                        "for a cut archive",
                        hint="copy the bundle again (or diagnose its directory); the verdict "
                             "needs the whole archive")


def _model_config(path: str | Path) -> dict[str, Any]:
    try:
        return load_config(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read model config {path}: {exc}",
                        hint="pass the model's config.json or its directory") from None


def _feed_tails(an: LogAnalysis, br: BundleReader, pre: str = "") -> None:
    """Attach-mode bundles have no child output, only ``logs/tail.json`` (source → lines); a
    multi-node bundle has one per node (``nodes/<id>/logs/tail.json``)."""
    tails = br.read_json(pre + "logs/tail.json")
    if not isinstance(tails, dict):
        return
    for src, lines in tails.items():
        if isinstance(lines, list):
            an.feed_lines(f"{pre}logs/tail.json:{src}", [x for x in lines if isinstance(x, str)])
            an.sources.append({"source": f"{pre}logs/tail.json:{src}", "bytes": 0,
                               "lines": len(lines), "long_lines": 0, "nccl_lines_skipped": 0})


def _is_plain_gz_log(p: Path) -> bool:
    """``vllm.log.gz``: a gzip that is not a tar is read as a compressed log. A file with the
    gzip magic whose first block does not decompress is refused (``UserError``, exit 2): it is
    corrupt, not empty."""
    import gzip
    import tarfile

    try:
        with open(p, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return False
        with tarfile.open(p, "r:gz") as tf:
            tf.next()
        return False
    except READ_ERRORS:
        try:
            with gzip.open(p, "rb") as g:
                g.read(1)
            return True
        except READ_ERRORS as exc:
            raise UserError(f"{p}: corrupt gzip ({type(exc).__name__}: {exc})",
                            hint="re-copy the file, or pass the uncompressed log") from None


def _open_log(p: Path) -> BinaryIO:
    if _is_plain_gz_log(p):
        import gzip

        return gzip.open(p, "rb")  # type: ignore[return-value]
    return open(p, "rb")  # noqa: SIM115


def _result(inputs: list[str], kind: str, an: LogAnalysis, lf: LogFacts,
            facts: BundleFacts | None, findings: list[Finding], notes: list[str]
            ) -> DiagnoseResult:
    ranks = []
    procs = sorted(lf.procs.values(), key=lambda p: (
        {"api-server": 0, "engine-core": 1, "worker": 2}.get(p.role, 3),
        p.rank if p.rank is not None else 1 << 30, p.pid or 0))
    wd = watchdog_by_rank(lf.waits.watchdog)
    for p in procs:
        d = p.to_dict()
        d["last_time"] = fmt_t(p.last_t)
        w = wd.get(p.rank) if p.rank is not None and p.role == "worker" else None
        d["watchdog"] = {k: v for k, v in w.items() if k != "ev"} if w else None
        ranks.append(d)
    # ranks that only torch watchdog lines name (no process of theirs in the log)
    seen = {p.rank for p in procs if p.role == "worker"}
    for r, w in sorted(wd.items()):
        if r not in seen:
            ranks.append({"process": None, "role": "worker", "rank": r, "pid": None,
                          "phase": None, "watchdog": {k: v for k, v in w.items() if k != "ev"}})
    phases = []
    for ph, t, src in lf.phases.timeline:
        ev = lf.phases.first_seen.get(ph)
        phases.append({"phase": ph, "first_seen": fmt_t(t), "source": src,
                       "evidence": ev.to_dict() if ev else None})
    versions = dict(lf.versions)
    if facts is not None and facts.nvml:
        s0 = facts.nvml[0]
        if s0.get("driver_version"):
            versions.setdefault("driver", s0["driver_version"])
        gpus = [str(g.get("name")) for g in s0.get("gpus") or []
                if isinstance(g, dict) and g.get("name")]
        if gpus:
            versions.setdefault("gpu", ", ".join(sorted(set(gpus))))
            versions.setdefault("gpu_count", len(gpus))
    stalls = {
        "shm_broadcast_waits": lf.waits.shm_count,
        "watchdog_records": len(lf.waits.watchdog),
        "rpc_timeouts": [m for m, _e, _k in lf.waits.rpc_timeouts[:10]],
        "worker_deaths": [{"proc": d.proc, "rank": d.rank, "exit_code": d.exit_code,
                           "evidence": e.to_dict()} for d, e, _k in lf.waits.deaths[:10]],
        "nccl_warnings": lf.nccl.warn_count,
        "nccl_warning_lines": [e.to_dict() for e in lf.nccl.warns[:5]],
        "nccl_transports": {k: sorted(v) for k, v in lf.nccl.transports.items()},
        "nccl_env": dict(lf.nccl.env),
        "stacks": [{"node": s.node, "pid": s.pid, "label": s.label, "rank": s.rank,
                    "top": s.top, "collective": s.collective, "sync": s.sync, "state": s.state}
                   for s in (facts.stacks if facts else [])],
    }
    verdict, state, phase = _verdict(lf, facts, findings)
    verdict = lead(verdict, facts.incomplete if facts is not None else None)
    if lf.phases.run:
        notes.append(f"the input holds {lf.phases.run + 1} launches (split at launch banners / vLLM "
                     "versions); their timelines and watchdog sequence numbers are kept apart, "
                     "the phase and ranks shown are the last launch's")
    for src, info in an.paste.items():
        if info.get("joined_lines"):
            notes.append(f"{src}: joined {info['joined_lines']} wrapped line(s) back into their "
                         "records")
    return DiagnoseResult(inputs=inputs, kind=kind, verdict=verdict, versions=versions,
                          config=dict(lf.config), ranks=ranks, phases=phases,
                          findings=findings, notes=notes, sources=an.sources, stalls=stalls,
                          nodes=node_table(facts) if facts is not None else [],
                          state=state, phase=phase, runs=lf.phases.run + 1,
                          engine=an.engines.engine)


def _verdict(an: LogFacts, facts: BundleFacts | None, findings: list[Finding]
             ) -> tuple[str, str, str | None]:
    """(verdict line, state, field phase). Exit 0 verdicts say *healthy* or *progressing*."""
    stage = an.phases.stage
    phase = field_phase(stage)
    if findings:
        top = findings[0]
        ph = top.phase or phase
        state = "stalled" if any(f.category in _STALL_CATS for f in findings[:1]) else "failed"
        return verdict_line(top, ph), state, ph
    last = an.last_text
    if last is not None and not an.failures and announces_long_step(last.text):
        return (f"progressing: {stage or 'startup'}; the last line announces a step that takes "
                f"minutes ({last.ref}): the quiet after it is expected"), "progressing", phase
    done = an.completed()
    if done is not None and not an.failures:  # a benchmark's summary, a ready server, ...
        more = f"; {an.advice_count} warning/advice line(s) it prints on healthy runs" \
            if an.advice_count else ""
        return (f"healthy: the run reached its goal ({done.ref}: "
                f"{clip_words(done.text.strip(), 120)}){more}"), "healthy", phase
    prog = an.progress.progressing
    if prog is not None:
        return prog, "progressing", phase
    if stage is not None and PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"]:
        what = "serving" if an.progress.served else "server started"
        extra = f" ({an.progress.metrics_lines} metrics intervals)" if an.progress.metrics_lines else ""
        return f"healthy: {what}{extra}", "healthy", phase
    if stage is None:
        return ("no failure recorded: no phase, error or stall that vLLM, SGLang, TGI, torchrun, "
                "Ray, NCCL or CUDA writes was found in the input"), "no-evidence", None
    # the log stops before the run said it was ready or done: no failure is recorded, but nothing
    # shows it healthy either (an excerpt cut short, or a start the log does not follow further)
    return (f"no failure recorded: the log ends in phase {stage}, before the run reported ready "
            "or done"), "incomplete", phase


def verdict_line(top: Finding, phase: str | None) -> str:
    """One line: the cause, where (ranks, phase) and how sure: ``cause: summary (rank 1,
    phase capture; confidence 0.80)``."""
    ranks = sorted(set(top.ranks))
    where = [(f"rank {ranks[0]}" if len(ranks) == 1 else
              f"ranks {', '.join(map(str, ranks[:8]))}") if ranks else "",
             f"phase {phase}" if phase else ""]
    at = ", ".join(w for w in where if w)
    return f"{top.category}: {top.summary} ({at + '; ' if at else ''}confidence {top.confidence:.2f})"


_STALL_CATS = frozenset({"collective-desync", "kernel-hang", "p2p-transport", "autotune-deadlock",
                         "dcp-warmup", "serving-stall", "cold-start-timeout", "cudagraph-capture"})


def node_table(facts: BundleFacts) -> list[dict[str, Any]]:
    """Multi-node bundles: per node its status and its ranks (where each one stopped)."""
    if not facts.nodes:
        return []
    out = []
    for n in facts.nodes:
        node = str(n.get("folder", "")).split("/", 1)[-1]
        ranks = [{"rank": s.rank, "label": s.label, "pid": s.pid, "state": s.state,
                  "where": s.collective or s.sync or s.top}
                 for s in sorted(facts.stacks, key=lambda s: (s.rank is None, s.rank or 0, s.pid))
                 if s.node == node and (s.role in ("worker", "warmup-rank") or s.rank is not None)]
        out.append({"node": node, "status": n.get("status"), "host": n.get("hostname"),
                    "is_head": n.get("is_head"), "error": n.get("error"),
                    "workers": n.get("workers") or [], "ranks": ranks})
    return out
