"""The registry's module table says, per check module, which (tier, kind) pairs it registers; a
run imports only the modules it can use. This keeps the table equal to the real registrations
(a check added to a module with a new tier or kind must update the table, or it would never
load), and shows that a tiers-0-1 run without a launch line imports neither the deep tier's
process tools nor the capacity planner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict

from sm120kit.doctor import registry
from tests.support.paths import ROOT


def test_module_table_matches_registrations() -> None:
    checks = registry.all_checks()
    seen: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for c in checks:
        seen[c.fn.__module__].add((c.tier, c.kind))
    assert {m: frozenset(v) for m, v in seen.items()} == registry.CHECK_MODULES


PROBE = """
import json, sys
from sm120kit.doctor import run_doctor
rep = run_doctor(tiers=(0, 1), nvml_timeout=2.0)
print(json.dumps({"ids": [c.id for c in rep.checks], "mods": sorted(sys.modules)}))
"""


def test_base_run_loads_only_what_it_uses() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=120, check=True)
    d = json.loads(p.stdout)
    for mod in ("sm120kit.doctor.checks.deep", "sm120kit.doctor.checks.capacity",
                "sm120kit.doctor.checks.layout", "sm120kit.services.proctree", "psutil"):
        assert mod not in d["mods"], mod
    assert not any(i.startswith("deep.") for i in d["ids"])
    assert any(i.startswith("gpu.") for i in d["ids"])  # tier 1 still ran
