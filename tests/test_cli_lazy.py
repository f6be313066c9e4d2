"""The lazy CLI (issue 22 item 4): ``sm120kit --help`` lists every command from the table in
``sm120kit/cli/group.py`` without importing any command module or capability."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sm120kit.cli.group import COMMANDS, load
from tests.support.paths import ROOT

CAPABILITIES = ("patchset", "doctor", "warmup", "collect", "diagnose", "validate")

PROBE = """
import io, json, sys, contextlib
from sm120kit.cli import run
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = run(sys.argv[1:])
print(json.dumps({"rc": rc, "out": out.getvalue(), "mods": sorted(sys.modules)}))
"""


def _probe(*argv: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(p.stdout)


def test_help_imports_no_command_module_or_capability() -> None:
    d = _probe("--help")
    assert d["rc"] == 0
    loaded = [m for m in d["mods"] if m.startswith("sm120kit.")]
    for cap in CAPABILITIES:
        assert not [m for m in loaded if m == f"sm120kit.{cap}" or
                    m.startswith(f"sm120kit.{cap}.")], (cap, loaded)
    mods = {t.target.split(":")[0] for t in COMMANDS.values()}
    assert not mods & set(loaded)
    assert not {"rich", "torch", "git", "pynvml"} & set(d["mods"])
    for name, entry in COMMANDS.items():  # the listing comes from the table
        assert name in d["out"] and entry.help.split()[0] in d["out"]


def test_one_command_loads_only_its_own_module() -> None:
    d = _probe("doctor", "--help")
    assert "sm120kit.cli.doctor" in d["mods"]
    for other in ("sm120kit.cli.collect", "sm120kit.cli.validate", "sm120kit.cli.warmup",
                  "sm120kit.collect", "sm120kit.validate", "sm120kit.diagnose"):
        assert other not in d["mods"], other


def test_every_table_row_loads_a_command_with_that_listing_line() -> None:
    for name, entry in COMMANDS.items():
        cmd = load(name)
        assert cmd.name == name
        assert cmd.get_short_help_str(limit=200) == entry.help
