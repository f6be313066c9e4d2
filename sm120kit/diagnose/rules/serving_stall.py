"""A server that stopped producing tokens while requests were running.

Evidence, strongest first: the engine's RPC to the workers timed out while serving
(``RPC call to sample_tokens timed out``, ``execute_model``: a worker stopped answering; the
engine then dies with ``EngineDeadError``), or the periodic metrics line shows ``Avg generation
throughput: 0.0 tokens/s`` with ``Running: N reqs`` (N > 0), or with nothing running, requests
queued (``Pending``/``Waiting: N reqs``) and no prefill, over consecutive intervals up to the end
of the log, without recovery. One zero interval during a long prefill is normal. Weakest:
the reporter says it hangs (a prose cue) and the log ends while serving, with nothing recorded.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext

_SERVING_RPC = ("sample_tokens", "execute_model", "execute_dummy_batch", "get_output")


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    out: list[Finding] = []
    rpc = [(m, e) for m, e, _k in lg.waits.rpc_timeouts if m in _SERVING_RPC]
    served = lg.progress.served or lg.phases.stage == "serving" or \
        any(p.tracker.stage == "serving" for p in lg.procs.values())
    if rpc and (served or rpc[0][0] == "sample_tokens"):
        m, e = rpc[0]
        out.append(RULE.finding(
            0.8, f"while serving, the engine's RPC `{m}` to the workers timed out: a worker "
            "stopped answering mid-step (a hung collective or kernel on some rank), it did not "
            "crash at startup", [e, *lg.progress.zero_streak_ev[-1:]], phase="serving", role="position"))
    streak = lg.progress.zero_streak
    if streak >= 2 and lg.progress.zero_streak_open:
        ev = [*lg.progress.zero_streak_ev[:1], *lg.progress.zero_streak_ev[-1:]]
        queued = "Running: 0 req" in ev[-1].text
        out.append(RULE.finding(
            0.7, f"generation throughput stayed at 0.0 tokens/s with requests "
            f"{'queued and none admitted' if queued else 'running'} for {streak} consecutive "
            "metrics intervals until the end of the log: the engine stopped making progress "
            "while serving", ev, phase="serving", role="position"))
    elif streak >= 1 and lg.progress.zero_streak_open and ctx.facts.described.symptoms and not rpc:
        ev = [*lg.progress.zero_streak_ev[-1:], ctx.described_ev(0)]
        out.append(RULE.finding(
            0.6, "requests were running at 0.0 tokens/s and the reporter describes a hang: the "
            "server stalled while serving", ev, phase="serving", role="position"))
    if not out and served and ctx.facts.described.symptoms and not lg.failures:
        out.append(RULE.finding(
            0.45, "the reporter says the server hangs or gets stuck and the log ends while it "
            "serves, with no error recorded: the engine stalled while serving",
            [ctx.described_ev(0)], phase="serving", role="position"))
    if lg.progress.zero_progress is not None and not out:
        out.append(RULE.finding(
            0.55, "generation never started: the progress bar stays at 0 requests done with "
            "0.00 tokens/s at the end of the log", [lg.progress.zero_progress], phase="serving",
            role="position"))
    return out


RULE = Rule(
    id="serving-stall",
    category="serving-stall",
    needs="'RPC call to sample_tokens/execute_model timed out', metrics lines 'Avg generation "
          "throughput: 0.0 tokens/s, Running: N reqs' up to the end of the log",
    tier="disagreement",
    check=check,
    fix="Collect every rank's stack while it hangs (`sm120kit collect --attach PID`); as A/B "
        "tests run with --enforce-eager (graph replay), --disable-custom-all-reduce / "
        "NCCL_P2P_DISABLE=1 (transport) and without speculative decoding; "
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS bounds how long the engine waits.",
    link=None,
)
