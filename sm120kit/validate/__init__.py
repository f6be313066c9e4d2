"""``sm120kit validate``: a numerical acceptance test of DCP against a DCP-1 reference.

Greedy completions with top-k logprobs on the DCP server and on the reference; long-context needle
probes placed on every DCP rank in turn; typed results (:mod:`sm120kit.validate.model`), no
printing. HTTP goes through ``httpx`` (extra ``validate``), imported only when a client is made.
"""

from sm120kit.validate.model import Check, Thresholds, ValidateResult, Verdict
from sm120kit.validate.run import ValidateOptions, validate

__all__ = ["Check", "Thresholds", "ValidateOptions", "ValidateResult", "Verdict", "validate"]
