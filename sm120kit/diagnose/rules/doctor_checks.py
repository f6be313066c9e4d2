"""Host/version problems that ``sm120kit doctor`` found on the box (bundle ``doctor.json``),
reported as configuration-tier context when the run failed or stalled."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words

# check id/area words → category (first match wins)
_MAP: tuple[tuple[tuple[str, ...], str], ...] = (
    (("dcp", "lse"), "dcp-unsupported"),
    (("p2p", "iommu", "acs", "topology", "pcie"), "p2p-transport"),
    (("shm", "memlock", "ipc"), "shared-memory"),
    (("preload", "interpos", "nccl_so"), "interposer"),
    (("nccl", "flashinfer", "vllm", "torch", "driver", "cuda", "version", "pin", "jit"),
     "library-version"),
    (("tp", "heads", "block", "topk", "config", "kv", "mtp"), "config-invalid"),
)


def _category(check_id: str, area: str) -> str:
    text = f"{check_id} {area}".lower()
    for words, cat in _MAP:
        if any(w in text for w in words):
            return cat
    return "unknown"


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None or not isinstance(b.doctor, dict):
        return []
    if not ctx.stalled() and not any(p.exception for p in ctx.workers()):
        return []
    checks = b.doctor.get("checks")
    if not isinstance(checks, list):
        return []
    out: list[Finding] = []
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or c.get("status") not in ("fail", "warn"):
            continue
        cid = str(c.get("id", "?"))
        if cid.startswith("gpu.nvml"):  # no driver on the collecting host: not a cause
            continue
        # a warning about the environment ranks below a crash's own error (a generic crash is
        # 0.25 after its -0.3); a failed check may still name the likelier cause
        conf = 0.45 if c.get("status") == "fail" else 0.2
        fix = str(c.get("fix") or RULE.fix)
        out.append(RULE.finding(
            conf, f"doctor {c.get('status')}: {cid}: {clip_words(str(c.get('summary', '')), 200)}",
            [Evidence("doctor.json", i + 1, f"{cid}: {c.get('summary', '')}")],
            fix=fix, category=_category(cid, str(c.get("area", "")))))
    return out[:4]


RULE = Rule(
    id="doctor-check",
    category="unknown",
    needs="bundle doctor.json (sm120kit doctor tiers 0-1) with fail/warn checks",
    tier="config",
    check=check,
    fix="Fix what `sm120kit doctor` reports, then reproduce.",
    link="docs/doctor.md",
)
