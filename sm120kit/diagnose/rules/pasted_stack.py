"""A stack dump pasted into the report (py-spy text): where the stuck process was.

A stack is only pasted when a process stopped making progress. Its innermost frames say what it
was doing: inside a collective or a host sync (waiting on a peer or the GPU), or inside a compute
kernel call that never returned (a kernel that hangs on the device); the outer frames say which
phase (warmup, capture, serving step).
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_WAIT = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "synchronize",
         "dequeue", "acquire_read", "wait", "recv", "send", "all_to_all")
_PHASE = (("capture", "capture"), ("warmup", "warmup"), ("autotun", "autotune"),
          ("load_model", "weight-load"), ("load_weights", "weight-load"), ("compile", "compile"),
          ("execute_model", "serving"), ("sample_tokens", "serving"), ("step", "serving"))


def check(ctx: RuleContext) -> list[Finding]:
    d = ctx.facts.described
    stacks = [s for s in d.stacks if s[3]]
    if not stacks:
        return []
    src, line, title, frames = stacks[0]
    inner = frames[0]
    func = inner.split(" (", 1)[0]
    phase = None
    for f in frames:
        name = f.split(" (", 1)[0].lower()
        for key, ph in _PHASE:
            if key in name:
                phase = ph
                break
        if phase:
            break
    waiting = any(w in func.lower() for w in _WAIT)
    ev = [Evidence(src, line, f"{title}: {inner}" if title else inner)]
    if waiting:
        return [RULE.finding(
            0.55, f"the pasted stack{' of ' + title if title else ''} waits in {func}: it is "
            "blocked on a peer rank or the GPU; compare with the other ranks' stacks",
            ev, tier="stacks", phase=phase, role="position", category="collective-desync")]
    return [RULE.finding(
        0.65, f"the pasted stack{' of ' + title if title else ''} is inside {inner}"
        + (f" during {phase}" if phase else "") + ": a GPU kernel call that never returned (a "
        "device-side hang), not a wait on another rank", ev, tier="stacks", phase=phase,
        role="position")]


RULE = Rule(
    id="pasted-stack",
    category="kernel-hang",
    needs="a py-spy dump pasted as text (Process/Thread headers, 'func (file:line)' frames)",
    tier="stacks",
    check=check,
    fix="Dump the stacks of every rank at the same moment (`sm120kit collect --attach PID`); "
        "rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel, and try the phase without it "
        "(e.g. --enforce-eager, or disable the sampler/autotune path named in the stack).",
    link=None,
)
