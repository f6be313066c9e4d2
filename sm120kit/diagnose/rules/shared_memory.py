"""/dev/shm too small or not shared: NCCL SHM segments and vLLM's shm_broadcast ring buffer."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    shm = ctx.hits("shm-error")
    nospace = ctx.hits("no-space")
    sem = ctx.hits("semlock")
    bus = ctx.hits("bus-error")
    errs = [e for e in shm if any(w in e.text for w in ("rror", "ailed", "could not", "No such",
                                                         "WARN", "denied"))]
    ev = errs + [e for e in nospace if "shm" in e.text or not errs] + sem + bus
    if not ev:
        return []
    strong = bool(errs or sem) or any("shm" in e.text for e in nospace)
    return [RULE.finding(0.85 if strong else 0.55,
                         "shared memory (/dev/shm) ran out or could not be attached", ev[:5],
                         tier="dead-rank" if strong else "config")]


RULE = Rule(
    id="shared-memory",
    category="shared-memory",
    needs="NCCL 'Error while creating shared memory segment', 'No space left on device', "
          "'could not attach to shared memory ring buffer', SemLock errors, 'Bus error'",
    tier="dead-rank",
    check=check,
    fix="Give the container a large /dev/shm: `docker run --ipc=host` or `--shm-size=16g`; "
        "check that no stale /dev/shm/nccl-* or psm_* files fill it.",
    link="https://docs.vllm.ai/en/latest/deployment/docker.html",
)
