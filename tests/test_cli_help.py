"""Help reads like the README (issue 32 item 5): the top-level help names ``--json`` and
``--debug``; every visible option of every command says what it does; a required option says so;
the examples in a command's help stand on lines of their own; help uses the README's words."""

from __future__ import annotations

import re

import click
import pytest

from sm120kit.cli import cli
from sm120kit.cli.group import COMMANDS, load
from tests.support.paths import ROOT


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from sm120kit.cli import run

    assert run([*args, "--help"]) == 0
    return capsys.readouterr().out


def _commands() -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name in sorted(COMMANDS):
        cmd = load(name)
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", c) for sub, c in sorted(cmd.commands.items())]
        else:
            out.append((name, cmd))
    return out


def test_top_level_help_names_json_and_debug(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    assert "Every command takes --json" in " ".join(text.split())
    assert "--debug" in text and "debug" in {p.name for p in cli.params}


def test_every_visible_option_is_described() -> None:
    missing = [f"{name} {'/'.join(p.opts)}" for name, cmd in _commands() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert missing == []


def test_required_options_are_marked(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "apply")
    branch = text[text.index("--branch"):text.index("--repo")]
    assert "required" in " ".join(branch.split())


def test_doctor_examples_stand_on_their_own_lines(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [ln.strip() for ln in _help(capsys, "doctor").splitlines()]
    for example in ("sm120kit doctor -- vllm serve MODEL -tp 8 -dcp 8 ...",
                    "sm120kit doctor --tp 8 --dcp 4 --config config.json",
                    "sm120kit doctor --log serve.log --json"):
        assert example in lines, lines


def test_examples_in_every_help_are_whole_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """A ``sm120kit ...`` example inside a paragraph is glued to prose by click's rewrapping;
    every one must start its own line (a ``\\b`` block)."""
    glued = []
    for name, _cmd in _commands():
        for ln in _help(capsys, *name.split()).splitlines():
            s = ln.strip()
            if "sm120kit " in s and not s.startswith(("sm120kit ", "Usage:", "-")) \
                    and re.search(r"\S\s+sm120kit \w+ -", s) and "`" not in s:
                glued.append(f"{name}: {s}")
    assert glued == []


def test_help_uses_the_readme_words() -> None:
    readme = (ROOT / "README.md").read_text()
    texts = [(p.help or "") for _n, cmd in _commands() for p in cmd.params
             if isinstance(p, click.Option)] + [cmd.help or "" for _n, cmd in _commands()]
    if "embedded default" not in readme:
        assert not [t for t in texts if "embedded default" in t.lower()]
