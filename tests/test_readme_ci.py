"""The README's two set-up commands and .ci/run agree (CI runs exactly the README's test line)."""

from __future__ import annotations

import re

from tests.support.paths import ROOT


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Set up"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block
    return [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_readme_has_exactly_two_setup_commands() -> None:
    cmds = _setup_commands()
    assert len(cmds) == 2
    # the main job installs only what apply needs; the test extras go with the test line
    assert cmds[0].startswith("pip install -e . && sm120kit apply --branch ")
    assert cmds[1] == "pip install -e '.[test]' -r tests/requirements.txt && python -m pytest -q"


def test_ci_runs_the_readme_test_line_and_installs_nothing_else() -> None:
    install, test = (c.strip() for c in _setup_commands()[1].split("&&"))
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    assert install in lines and test in lines
    installs = [ln for ln in lines if re.search(r"\bpip\b.*\binstall\b", ln)]
    assert installs == [install]


def test_requirements_pin_cpu_torch_first() -> None:
    reqs = [ln.strip() for ln in (ROOT / "tests/requirements.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    assert reqs[0] == "torch==2.13.0"
