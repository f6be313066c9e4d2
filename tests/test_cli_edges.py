"""Edges a new user hits (issue 15, item 10), each through the real CLI.

Two tests hide one third-party package from the CLI's Python with a module on ``PYTHONPATH`` that
raises ``ModuleNotFoundError`` exactly as an absent package does: ``torch`` and ``numpy`` are
installed for the test suite itself, so their absence is staged this way for a subprocess.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from sm120kit.cli import cli, run
from sm120kit.cli.warmup import warmup_group
from tests.support.paths import ROOT


def _without(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    shadow = tmp_path / f"no-{module}"
    shadow.mkdir()
    (shadow / f"{module}.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "sm120kit", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_warmup_run_without_torch_is_one_error_line(tmp_path: Path) -> None:
    proc = _without(tmp_path, "torch", "warmup", "run", "--dcp", "2")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == "error: warmup run: torch cannot be imported (No module named 'torch')"
    assert lines[1].startswith("hint: ") and "pip install torch" in lines[1]
    assert len(lines) == 2 and "Traceback" not in proc.stderr


def test_torch_numpy_warning_does_not_precede_the_error(tmp_path: Path) -> None:
    # 16 NCCL ranks: refused in the supervisor after importing torch, on any machine here
    proc = _without(tmp_path, "numpy", "warmup", "run", "--device", "cuda", "--dcp", "16")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith("error: --device cuda"), proc.stderr
    assert "NumPy" not in proc.stderr


def test_warmup_run_help_describes_every_choice_option() -> None:
    cmd = warmup_group.commands["run"]
    helps = {p.name: getattr(p, "help", None) for p in cmd.params}
    for name in ("backend", "device", "plan_name", "merge", "max_model_len", "dist_backend"):
        assert helps[name] and len(helps[name]) > 20, name
    text = cmd.get_help(click.Context(cmd, info_name="run"))
    for flag in ("--backend", "--device", "--plan", "--merge", "--max-model-len"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(flag))
        assert len(line.split(flag, 1)[1].strip()) > 10 or "\n" in text, flag


@pytest.mark.parametrize("typed", ["0.34.0", "v0.34.0"])
def test_unknown_alias_suggests_the_near_one(typed: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # outside any checkout: the embedded default
    rc = run(["apply", "--branch", typed, "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"error: unknown branch alias '{typed}'; did you mean vllm-0.34.0?" in err


def test_shared_options_are_declared_once() -> None:
    """``--json``, ``--markdown``, ``--branch``, ``--repo``, ``--installed``, ``--python``,
    ``--state-dir`` and the DCP shape options (``--dcp``, ``--block-size``, ``--interleave``,
    ``--stall-timeout``) come from sm120kit/cli/options.py in every command, with one help text
    and one default each."""
    shared = {"--json", "--markdown", "--branch", "--repo", "--installed", "--python",
              "--state-dir", "--dcp", "--block-size", "--interleave", "--stall-timeout"}
    found = []
    for path in sorted((ROOT / "sm120kit" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "option"):
                for a in node.args:
                    if isinstance(a, ast.Constant) and a.value in shared:
                        found.append((path.name, a.value))
    assert sorted(found) == sorted(("options.py", f) for f in shared)
    # and every command that has --json names it the same way
    ctx = click.Context(cli)
    seen: dict[str, set] = {}
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        subs = cmd.commands.values() if isinstance(cmd, click.Group) else [cmd]
        for c in subs:
            for p in c.params:
                if "--json" in getattr(p, "opts", []):
                    assert p.name == "as_json", (name, c.name)
                for opt in ("--dcp", "--block-size", "--interleave", "--stall-timeout"):
                    if opt in getattr(p, "opts", []):
                        seen.setdefault(opt, set()).add((p.help, p.default))
    assert set(seen) == {"--dcp", "--block-size", "--interleave", "--stall-timeout"}
    assert all(len(v) == 1 for v in seen.values()), seen
    assert seen["--stall-timeout"] == {(next(iter(seen["--stall-timeout"]))[0], 120.0)}
    assert "[64]" in next(iter(seen["--block-size"]))[0]


def test_one_stall_timeout_and_block_size_default() -> None:
    """The capabilities' own defaults are the same constants the options show."""
    import dataclasses

    from sm120kit.models.kv import DEFAULT_BLOCK_SIZE
    from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S
    from sm120kit.services.supervision import LaunchOptions
    from sm120kit.validate.launch import LaunchSettings
    from sm120kit.warmup.config import RunConfig

    assert DEFAULT_STALL_TIMEOUT_S == 120.0 and DEFAULT_BLOCK_SIZE == 64
    for cls in (LaunchOptions, LaunchSettings, RunConfig):
        f = {x.name: x for x in dataclasses.fields(cls)}["stall_timeout"]
        assert f.default == DEFAULT_STALL_TIMEOUT_S, cls
    assert {x.name: x for x in dataclasses.fields(RunConfig)}["block_size"].default == 64


def test_doctor_says_when_the_weights_alone_do_not_fit(tmp_path: Path) -> None:
    """Issue 23 item 7: 919 GB of weights over TP 8 is ~107 GiB per GPU, more than a 96 GiB GPU
    holds; doctor used to advise "lower --max-model-len to about 0"."""
    import json
    import shutil

    model = tmp_path / "big-model"
    model.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "kv" / "glm52_reap_nvfp4_config.json",
                model / "config.json")
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 919_000_000_000}, "weight_map": {}}))
    p = subprocess.run([sys.executable, "-m", "sm120kit", "doctor", "--tier", "0", "--json",
                        "--only", "launch.kv_capacity", "--config", str(model), "--dcp", "8",
                        "--tp", "8", "--max-model-len", "131072", "--gpu-mem-gib", "96"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    check = next(c for c in json.loads(p.stdout)["checks"] if c["id"] == "launch.kv_capacity")
    assert p.returncode == 2 and check["status"] == "fail"
    assert "the weights alone (" in check["summary"] and "do not fit" in check["summary"]
    assert "about 0" not in (check["fix"] or "")
    assert "more GPUs" in check["fix"]


def test_doctor_only_bogus_hint_is_whole_words(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "sm120kit", "doctor", "--only", "bogus"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    hint = next(line for line in p.stderr.splitlines() if line.startswith("hint: "))
    assert hint.endswith("lists every check id") and "launch" in hint


def test_docs_put_sm120kit_options_before_the_launch_line() -> None:
    """After ``--`` everything is the serve line: an sm120kit option there would go to vLLM."""
    ours = {"--json", "--markdown", "--debug"}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("sm120kit ") and " -- " in line:
                after = line.split(" -- ", 1)[1].split("#")[0].split()
                assert not ours & set(after), (doc.name, line)
