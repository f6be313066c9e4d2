"""A pasted excerpt that stops in a short startup step with no error: either the run hung right
there or its failure is after the excerpt. Where it stopped says what kind of cause waits there
(``catalogue/stops/stops.toml``: NCCL's transport setup, the first all-reduces of the profiling
run, graph capture, per-rank autotune); a weak claim (0.3; 0.45 when the reporter says it hangs),
only for the steps the map names and, where the map says so, only for a start with more than one
rank."""

from __future__ import annotations

from sm120kit.diagnose.catalogue import is_completion
from sm120kit.diagnose.catalogue.stops import stop_rules
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase

FIX = ("Paste the lines after this point (or the whole log); if there are none, the run is stuck "
       "here: take every rank's stack (`sm120kit collect --attach PID`).")


def _ranks(ctx: RuleContext) -> int:
    cfg = ctx.facts.config
    par = max(int(cfg.get(k) or 1) for k in ("tp", "pp", "dp"))
    return max(par, len(ctx.facts.workers), len(ctx.facts.nccl.transports))


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    # None as well for a run that reached its goal, or an excerpt that ends with the step's result
    stop, last = ctx.stopped_at(), lg.last_text
    hang = bool(lg.described.symptoms)  # the reporter says it hangs: the stop is the place
    if lg.failures or stop is None or last is None or lg.described.complaints:
        return []
    rule = stop_rules().get(stop)
    done = is_completion(last.text)  # "torch.compile takes 4.5 s in total"
    words = (f"the pasted log ends right after a step of {stop} finished; the failure is after "
             "the excerpt" if done else f"the pasted log stops during {stop} without an error: "
             "either the run hung right there or its failure is after the excerpt")
    category, ev = "unknown", [last]
    if hang:
        words = f"the reporter says the run hangs and the pasted log stops during {stop}"
        ev = [ctx.described_ev(0), last]
    if rule is not None and not done and (not rule.multi_gpu or _ranks(ctx) > 1):
        category, words = rule.category, f"{words}; {rule.why}"
    return [RULE.finding(0.45 if hang and category != "unknown" else 0.3, words, ev,
                         category=category, phase=field_phase(stop), role="position", fix=FIX)]


RULE = Rule(
    id="stopped-excerpt",
    category="unknown",
    needs="a pasted excerpt that ends in a short startup step with no failure line",
    tier="config",
    check=check,
    fix=FIX,
)
