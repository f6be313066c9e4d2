"""``sm120kit diagnose``: name the cause of a stall from logs or a bundle (offline).

* :mod:`.engine` — read the inputs (logs, bundles) into facts, run the rules, build the verdict;
* :mod:`.rules` — one rule per file over :class:`~sm120kit.diagnose.rules.base.RuleContext`.

The readers it uses live in :mod:`sm120kit.evidence`.
"""
