"""Healthy stays healthy (issue 29 item 4): a run that reaches its goal with only the warnings and
advice its software prints on healthy runs exits 0 with no finding, and the same warnings in a
failing run do not hide its failure.

The logs in tests/diagnose/healthy_logs/ are composed (no public thread holds these runs): each
is a run of one engine in the shape it prints (nccl-tests over RCCL and over NCCL, vLLM V1 with
multiproc workers, SGLang, torchrun, vLLM on Ray, TGI), its warnings worded as the sources named in
sm120kit/diagnose/catalogue/benign.toml print them. Before benign.toml and the run-completed
reading, the RCCL run was `p2p-transport` 0.74 (its iommu WARN read as "it hangs"), the vLLM run
`cudagraph-capture` 0.70 (the fd-limit warning quotes an OSError) and the torchrun run
"progressing: nccl-init".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.catalogue.schema import parse_entry
from sm120kit.diagnose.engine import diagnose

LOGS = Path(__file__).resolve().parent / "healthy_logs"

# log -> (engine, the number of advice lines benign.toml names in it)
HEALTHY = {
    "rccl-tests-ok.log": ("nccl-tests", 1),
    "nccl-tests-ok.log": ("nccl-tests", 0),  # its NCCL INFO advice is skipped unparsed
    "vllm_ok.log": ("vllm", 7),
    "sglang_ok.log": ("sglang", 1),
    "torchrun_ok.log": ("torchrun", 2),
    "ray_vllm_ok.log": ("vllm", 1),
    "tgi_ok.log": ("tgi", 2),
}
# the same warnings beside a failure: log -> the top category
FAILING = {
    "f_oom.log": "out-of-memory",  # vLLM's warnings, then an OOM in the profiling run
    "f_p2p.log": "p2p-transport",  # "lacks GPU P2P capability" beside shm_broadcast stalls
    "f_rccl_hang.md": "p2p-transport",  # the iommu WARN in a ticket that says it hangs
    "f_torchrun.log": "out-of-memory",  # torchrun's hints, then a rank's OOM
    "f_tgi.log": "out-of-memory",  # TGI's launcher warnings, then a shard's OOM in warmup
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_run_that_reached_its_goal_with_warnings_is_healthy(name: str) -> None:
    res = diagnose([LOGS / name])
    assert res.exit_code == 0 and not res.findings, res.verdict
    engine, advice = HEALTHY[name]
    assert res.engine == engine
    assert res.state == "healthy" and "reached its goal" in res.verdict, res.verdict
    assert (f"{advice} warning/advice line" in res.verdict) == bool(advice), res.verdict


@pytest.mark.parametrize("name", sorted(FAILING))
def test_the_same_warnings_do_not_hide_a_failure(name: str) -> None:
    res = diagnose([LOGS / name])
    assert res.exit_code == 1 and res.findings, res.verdict
    assert res.findings[0].category == FAILING[name], res.verdict


def test_advice_lines_are_no_failure_cue_or_evidence() -> None:
    cat = C.load(environ={})
    line = ('h:1:1 [0] misc/strongstream.cc:39 NCCL WARN Missing "iommu=pt" from kernel command '
            "line which can lead to system instablity or hang!")
    adv = cat.advice(line)
    assert adv is not None and adv.id == "rccl-host-tuning-advice" and adv.category == "none"
    assert cat.scan(line) == []
    # a line with an error on it is not advice, whatever its words: vLLM raises the same message
    # when strict environment checking is on, and an ERROR-level line states a failure
    assert cat.advice("RuntimeError: NCCL error: unhandled system error") is None
    assert cat.advice("WARNING 09-02 10:00:00 [envs.py:1500] Unknown vLLM environment variable "
                      "detected: VLLM_CACHE_DIR") is not None
    assert cat.advice("ValueError: Unknown vLLM environment variable detected: VLLM_CACHE_DIR") is None
    assert cat.advice("(Worker pid=3) ERROR 09-02 10:00:00 [custom_all_reduce.py:146] Custom "
                      "allreduce is disabled because your platform lacks GPU P2P capability") is None
    # advice that quotes an exception in backticks is still advice
    assert cat.advice("WARNING 05-02 08:11:05 utils.py:2268] Found ulimit of 1024 and failed to "
                      "automatically increase with error x. This can cause fd limit errors like "
                      "`OSError: [Errno 24] Too many open files`. Consider increasing with "
                      "ulimit -n") is not None


def test_completed_nccl_tests_run_with_a_failed_check_is_not_healthy(tmp_path: Path) -> None:
    """nccl-tests prints its summary after a failed bandwidth or data check too ("FAILED")."""
    text = (LOGS / "nccl-tests-ok.log").read_text()
    log = tmp_path / "failed-check.log"
    log.write_text(text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")
                   .replace("17.4612 ", "17.4612 FAILED"))
    res = diagnose([log])
    assert res.exit_code == 1, res.verdict


def test_a_goal_reached_by_an_earlier_run_says_nothing_of_the_last(tmp_path: Path) -> None:
    """nccl-tests runs one test after another: the first test's summary, then the next test's
    header and init lines where the paste ends (and the person says it hangs there)."""
    text = (LOGS / "rccl-tests-ok.log").read_text()
    head = text[:text.index("#\n#  ")]  # the header, the RCCL WARN and the init lines
    log = tmp_path / "next-test.md"
    log.write_text("The second test hangs after init:\n\n```\n" + text
                   + "./broadcast_perf -b 8 -e 128M -f 2 -g 2\n" + head + "```\n")
    res = diagnose([log])
    assert res.exit_code == 1 and "reached its goal" not in res.verdict, res.verdict
    assert res.findings[0].category == "p2p-transport", res.verdict


def test_an_excerpt_that_ends_after_the_kv_cache_is_sized_is_not_a_stop(tmp_path: Path) -> None:
    """vLLM's profiling result ("Available KV cache memory") means every rank passed the profiling
    run; the same excerpt cut before that line still stops in the profiling step."""
    head = ("```\n"
            "(EngineCore pid=542) INFO 07-08 22:40:03 [monitor.py:53] torch.compile took 16.27 s in total\n"
            "(EngineCore pid=542) INFO 07-08 22:40:04 [gpu_model_runner.py:6483] Profiling CUDA graph "
            "memory: PIECEWISE=51 (largest=512)\n")
    done = "(EngineCore pid=542) INFO 07-08 22:40:06 [gpu_worker.py:508] Available KV cache memory: 37.99 GiB\n"
    (tmp_path / "after.md").write_text(head + done + "```\n")
    (tmp_path / "during.md").write_text(head + "```\n")
    assert diagnose([tmp_path / "after.md"]).exit_code == 0
    assert diagnose([tmp_path / "during.md"]).exit_code == 1


@pytest.mark.parametrize("raw, key", [
    ({"id": "x-advice", "category": "unknown", "role": "advice", "summary": "s", "fix": "f",
      "patterns": ["a warning"]}, "category"),
    ({"id": "x-cause", "category": "none", "summary": "s", "fix": "f",
      "patterns": ["a warning"]}, "category"),
])
def test_category_none_goes_with_role_advice_only(raw: dict[str, object], key: str) -> None:
    with pytest.raises(C.CatalogueError, match=f"key '{key}'"):
        parse_entry("benign.toml: entry 1", raw, "benign.toml")
