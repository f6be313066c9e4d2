"""The failure-signature catalogue (sm120kit/diagnose/catalogue/*.toml): every shipped entry is
valid and rests on real lines; advice and completion lines are never evidence; users extend it
with ``--catalogue`` / ``$SM120KIT_CATALOGUE``; a malformed entry is a one-line error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120kit import cli
from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.catalogue.conditions import When
from sm120kit.diagnose.engine import diagnose
from sm120kit.diagnose.rules import RULES

DATA = Path(__file__).resolve().parents[1] / "data"
FIELD = DATA / "field-logs"
RULE_DIR = Path(C.__file__).resolve().parents[1] / "rules"
# real lines that advise, help or report completion (vLLM / PyTorch wording): never evidence
NOT_EVIDENCE = [
    "(EngineCore_DP0 pid=1) INFO 01-27 00:32:06 [monitor.py:34] torch.compile takes 4.51 s in total",
    "(EngineCore_DP0 pid=1) INFO 01-27 00:33:10 [gpu_model_runner.py:2708] Graph capturing finished "
    "in 21 secs, took 1.02 GiB",
    "(EngineCore_DP0 pid=1) INFO 01-27 00:31:10 [default_loader.py:267] Loading weights took 12.35 "
    "seconds",
    "WARNING 01-27 00:31:10 [gpu_worker.py:1] If you are running out of memory, consider decreasing "
    "`gpu_memory_utilization` or enabling CPU offload",
    "WARNING: --disable-log-requests is deprecated and will be removed in v0.12",
    "usage: vllm serve [-h] [--model MODEL] [--tensor-parallel-size TENSOR_PARALLEL_SIZE]",
]


def _source_lines(urls: list[str]) -> list[str]:
    """Every line of the tuning-corpus logs (field-logs, field-logs-b) whose thread is one of ``urls``."""
    out: list[str] = []
    for corpus in (FIELD, DATA / "field-logs-b"):
        for e in json.loads((corpus / "manifest.json").read_text()):
            if e.get("source_url") in urls:
                out += (corpus / e["file"]).read_text(encoding="utf-8",
                                                      errors="replace").splitlines()
    return out


def test_every_shipped_entry_is_valid_sourced_and_matches_real_lines() -> None:
    cat = C.load(environ={})
    assert len(cat.entries) >= 8
    for e in cat.entries.values():
        assert e.sources and all(u.startswith("https://") for u in e.sources), e.id
        assert e.fix and e.summary, e.id
        lines = _source_lines(e.sources) + e.examples
        for pat, rx in zip(e.patterns, e._rx, strict=True):
            hit = [ln for ln in lines if rx.search(ln) and e.match(ln)]
            assert hit, f"{e.id}: pattern {pat!r} matches no line of its sources or examples"
            # and the whole scanner names the entry on that line (an advice entry: the advice
            # gate names it, and no entry without conditions reads the line as evidence)
            if e.role == "advice":
                assert any((a := cat.advice(ln)) is not None and a.id == e.id for ln in hit), e.id
                named = [cat.get(sid) for ln in hit for sid, _m in cat.scan(ln)]
                assert all(x is not None and x.conditions() != When() for x in named), (e.id, named)
            else:
                assert any(("cat:" + e.id) in dict(cat.scan(ln)) for ln in hit), (e.id, pat)


@pytest.mark.parametrize("line", NOT_EVIDENCE)
def test_advice_and_completion_lines_are_never_evidence(line: str) -> None:
    assert C.not_evidence(line)
    assert C.load(environ={}).scan(line) == []


def test_an_error_line_with_advice_in_it_is_still_evidence() -> None:
    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert [s for s, _m in C.load(environ={}).scan(line)] == ["cat:cuda-oom"]


def test_structural_rule_modules_are_small() -> None:
    big = {p.name: n for p in RULE_DIR.glob("*.py")
           if (n := len(p.read_text().splitlines())) >= 80 and p.name not in ("base.py", "__init__.py")}
    # the signature rules that moved into the catalogue are gone
    assert not {"shared_memory.py", "out_of_memory.py", "config_invalid.py", "interposer.py"} & {
        p.name for p in RULE_DIR.glob("*.py")}
    assert len(RULES) >= 15
    # the signature rules folded into entries by issue 29 (dcp.toml, config.toml) are gone too
    assert not {"checkpoint_config.py", "dcp_unsupported.py"} & {p.name for p in RULE_DIR.glob("*.py")}
    # every structural rule module is under 80 lines (issue 29): what one reads from its input
    # is a typed fact (diagnose.facts, evidence.*), the module only decides
    assert not big, big


BAD = [
    ('[[entry]]\nid = "x-y"\ncategory = "bogus"\nsummary = "s"\nfix = "f"\npatterns = ["a"]\n',
     "'category'"),
    ('[[entry]]\nid = "x-y"\ncategory = "unknown"\nsummary = "s"\nfix = "f"\npatterns = ["(a"]\n',
     "'patterns'"),
    ('[[entry]]\nid = "x-y"\ncategory = "unknown"\nsummary = "s"\nfix = "f"\npatterns = []\n',
     "'patterns'"),
    ('[[entry]]\nid = "x-y"\ncategory = "unknown"\nsummary = "s"\nfix = "f"\npatterns = ["a"]\n'
     'confidence = 3\n', "'confidence'"),
    ('[[entry]]\nid = "x-y"\ncategory = "unknown"\nsummary = "s"\nfix = "f"\npatterns = ["a"]\n'
     'colour = "red"\n', "'colour'"),
    ('[[entry]]\nid = "x-y"\ncategory = "unknown"\nsummary = "s"\nfix = "f"\npatterns = ["a"]\n'
     'phase = "lunch"\n', "'phase'"),
    ('[[entry]\nid = 1\n', "not valid TOML"),
]


@pytest.mark.parametrize(("text", "key"), BAD)
def test_malformed_entry_is_one_line_naming_file_and_key(tmp_path: Path, text: str, key: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "mine.toml"
    bad.write_text(text)
    log = FIELD / "nccl-342.txt"
    assert cli.run(["diagnose", "--catalogue", str(bad), str(log)]) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("error: ") and str(bad) in first and key in first, err
    assert "Traceback" not in err


USER = '''
[[entry]]
id = "worker-abort-mine"
category = "collective-desync"
summary = "my team's signature: a worker aborted"
confidence = 0.7
patterns = ['Worker VllmWorkerProcess pid \\d+ died, exit code: -6']
fix = "see our runbook"
sources = ["https://github.com/vllm-project/vllm/issues/6042"]
'''


def test_users_add_entries_by_flag_and_by_environment(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = FIELD / "vllm-6042.txt"
    assert "worker-abort-mine" not in {f.rule for f in diagnose([log]).findings}
    d = tmp_path / "cat"
    d.mkdir()
    (d / "team.toml").write_text(USER)
    f = next(f for f in diagnose([log], catalogue=[d]).findings if f.rule == "worker-abort-mine")
    assert f.category == "collective-desync" and f.fix == "see our runbook"
    assert any("exit code: -6" in e.text for e in f.evidence)
    monkeypatch.setenv(C.ENV, str(d / "team.toml"))
    assert "worker-abort-mine" in {f.rule for f in diagnose([log]).findings}


def test_explain_prints_an_entry_with_sources_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["diagnose", "--explain", "stream-capture-unsupported"]) == 0
    out = capsys.readouterr().out
    assert "cudagraph-capture" in out and "https://github.com/vllm-project/vllm/issues/52682" in out
    assert "fix:" in out and "cudaErrorStreamCaptureUnsupported" in out
    assert cli.run(["diagnose", "--explain", "no-such-entry"]) == 2
    assert "no catalogue entry 'no-such-entry'" in capsys.readouterr().err


def test_new_wordings_and_capture_errors_are_named(tmp_path: Path) -> None:
    """The weight-shape message reworded across releases, and a capture error reported by a
    worker, name their cause, not a bare crash."""
    rows = ["(EngineCore_DP0 pid=10) ERROR 01-01 00:00:01 [core.py:700] EngineCore failed to start.",
            "(EngineCore_DP0 pid=10) Traceback (most recent call last):",
            "(EngineCore_DP0 pid=10) AssertionError: Tried to load weights of size torch.Size([168]) "
            "to a parameter of size torch.Size([256])"]
    p = tmp_path / "w.log"
    p.write_text("\n".join(rows) + "\n")
    assert diagnose([p]).findings[0].category == "checkpoint-config"
    rows[-1] = ("(EngineCore_DP0 pid=10) torch.AcceleratorError: CUDA error: dependency created on "
                "uncaptured work in another stream")
    p.write_text("\n".join(rows) + "\n")
    assert diagnose([p]).findings[0].category == "cudagraph-capture"


def test_unknown_names_the_root_error_line_phase_and_nearest_entries(tmp_path: Path) -> None:
    """An error no entry knows: ``unknown`` with the innermost exception of the chain (Python
    prints the cause first), its file:line, the phase, and the three nearest entries."""
    rows = ["(EngineCore_DP0 pid=10) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model x",
            "(EngineCore_DP0 pid=10) Traceback (most recent call last):",
            "(EngineCore_DP0 pid=10) RuntimeError: CUDA error: operation not permitted when stream "
            "is being recorded by a graph",
            "(EngineCore_DP0 pid=10) The above exception was the direct cause of the following exception:",
            "(EngineCore_DP0 pid=10) Traceback (most recent call last):",
            "(EngineCore_DP0 pid=10) RuntimeError: Engine core initialization failed."]
    p = tmp_path / "u.log"
    p.write_text("\n".join(rows) + "\n")
    f = diagnose([p]).findings[0]
    assert f.category in ("unknown", "rank-crashed"), f
    assert "u.log:3" in f.summary and "weight-load" in f.summary
    if f.category == "rank-crashed":  # "looks like" pointers only for unknown (issue 32 item 4)
        assert "looks like" not in f.summary
        f = next(g for g in diagnose([p]).findings if g.category == "unknown") if any(
            g.category == "unknown" for g in diagnose([p]).findings) else f
    if f.category == "unknown":
        near = f.summary.split("looks like: ", 1)[1]
        assert near.startswith("stream-capture-unsupported — https://") and near.count(" — ") == 3


def test_nearest_ranks_the_relative_first() -> None:
    from sm120kit.diagnose.catalogue.nearest import nearest
    es = list(C.load(environ={}).entries.values())
    assert nearest(es, "OSError: shared memory segment /psm_1 could not be created")[0][0].id == \
        "shm-segment"
    assert nearest(es, "RuntimeError: CUDA error: out of memory while allocating workspace")[0][0].id \
        == "cuda-oom"


def test_corrupt_gzip_is_refused_unrelated_text_is_not(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "vllm.log.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(7, 200)))
    assert cli.run(["diagnose", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "corrupt gzip" in err and "empty" not in err
    prose = tmp_path / "notes.txt"
    prose.write_text((Path(__file__).resolve().parents[2] / "LICENSE").read_text()
                     if (Path(__file__).resolve().parents[2] / "LICENSE").is_file()
                     else "Shopping list\n- eggs\n- bread\n- call the plumber on Tuesday\n")
    # exit 2 only for empty, binary or unreadable input (issue 29 item 4): text is read
    assert cli.run(["diagnose", str(prose)]) == 0
    assert "no failure recorded" in capsys.readouterr().out


def test_gate_literals_are_in_every_match() -> None:
    """The one-pass gate tests literals first: each must be in every line its pattern matches
    (checked on every corpus line a shipped pattern matches, and every example)."""
    from sm120kit.diagnose.catalogue.needles import branches, needles
    assert branches("a|b(c|d)|[|]x") == ["a", "b(c|d)", "[|]x"]
    assert needles("Attempted to load weight \\(torch\\.Size") == ["Attempted to load weight (torch.Size"]
    assert needles("ab?c") is None and needles("(?i)killed") is None
    cat = C.load(environ={})
    for e in cat.entries.values():
        lines = _source_lines(e.sources) + e.examples
        for pat, rx in zip(e.patterns, e._rx, strict=True):
            lits = needles(pat)
            for ln in lines:
                if rx.search(ln):
                    assert lits is None or any(n in ln for n in lits), (e.id, pat, ln)


def test_a_completion_line_is_not_read_as_the_stall() -> None:
    """vllm-33155 ends on 'torch.compile takes 4.51 s in total': compile finished there."""
    f = diagnose([FIELD / "vllm-33155.txt"]).findings[0]
    assert "finished" in f.summary and "stops during" not in f.summary
    assert f.category == "unknown" and f.confidence < 0.5


# vLLM's own announcement before a cold FlashInfer JIT (field-logs-b/vllm-46764, line 18)
_ANNOUNCE = ("(Worker_TP0 pid=243689) INFO 06-25 20:11:05 [qwen_gdn_linear_attn.py:1095] Warming "
             "up FlashInfer GDN prefill kernel (cold cache JIT-compile may take several minutes; "
             "cached under /home/u/.cache/flashinfer/0.6.12/90a/cached_ops).")


def test_an_announced_long_step_at_the_end_is_progressing(tmp_path: Path) -> None:
    """An excerpt that ends on a line announcing minutes of work is progressing (exit 0); the
    same line followed by an error is still a failure."""
    ok = tmp_path / "ok.log"
    ok.write_text(_ANNOUNCE + "\n")
    res = diagnose([ok])
    assert res.exit_code == 0 and res.verdict.startswith("progressing"), res.verdict
    bad = tmp_path / "bad.log"
    bad.write_text(_ANNOUNCE + "\n(Worker_TP0 pid=243689) ERROR 06-25 20:31:05 [core.py:1] "
                   "RuntimeError: Ninja build failed\n")
    assert diagnose([bad]).exit_code == 1
    assert not C.announces_long_step("RuntimeError: this may take several minutes to fail")


def test_every_shipped_signal_names_where_its_message_comes_from() -> None:
    """The named line facts (signals.toml, folded from evidence/logs/signals.py) are catalogue
    data: each has sources and compiled rows, and the analysis counts them through the scanner."""
    cat = C.load(environ={})
    assert len(cat.signals) >= 60
    for s in cat.signals.values():
        assert s.sources and s.rows, s.id
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert [sid for sid, _m in cat.scan_line(line)] == ["cuda-oom", "cat:cuda-oom"]
    # the stall classifier's finer ids come from evidence/phases.py, written once
    assert "heartbeat" in cat.table.ids


BAD_SIGNALS = [
    ('[[signal]]\nid = "x-y"\nmatch = [["a", "(a"]]\nsources = ["s"]\n', "'match'"),
    ('[[signal]]\nid = "x-y"\nmatch = [["a"]]\nsources = ["s"]\n', "'match'"),
    ('[[signal]]\nid = "x-y"\nmatch = [["a", "a"]]\n', "'sources'"),
    ('[[signal]]\nid = "X y"\nmatch = [["a", "a"]]\nsources = ["s"]\n', "'id'"),
    ('[[signal]]\nid = "x-y"\nmatch = [["a", "a"]]\nsources = ["s"]\ncolour = 1\n', "'colour'"),
    ('[[signals]]\nid = "x-y"\n', "'signals'"),
]


@pytest.mark.parametrize(("text", "key"), BAD_SIGNALS)
def test_malformed_signal_is_one_line_naming_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    bad = tmp_path / "mine.toml"
    bad.write_text(text)
    with pytest.raises(C.CatalogueError) as exc:
        C.load([bad], environ={})
    assert str(bad) in str(exc.value) and key in str(exc.value), str(exc.value)


def test_a_user_signal_extends_the_shipped_ones(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('[[signal]]\nid = "my-fabric"\nabout = "our fabric"\n'
                    'match = [["fabric", "fabric manager (?P<v>\\\\w+)"]]\nsources = ["our runbook"]\n')
    cat = C.load([mine], environ={})
    hits = dict(cat.scan_line("nv fabric manager down"))
    assert hits["my-fabric"].group("v") == "down"
