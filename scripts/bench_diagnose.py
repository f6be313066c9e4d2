"""Benchmark ``sm120kit diagnose --json`` on two large realistic logs, against anchors measured in
the same run.

1. **NCCL flood** (``--size-mb``, default 1024): a vLLM TP8/DCP8 log: the startup lines of 8
   workers, NCCL_DEBUG=INFO init output of 8 ranks (version, comm/rank lines, P2P channels), then
   NCCL ``COLL`` traces of 8 ranks interleaved with vLLM serving lines and shm_broadcast waits, and
   at the end torch watchdog timeouts where rank 3 lags one SeqNum. Target: >= 150 MB/s.
2. **vLLM serving-heavy** (``--serving-mb``, default 70): a started server's log: per second a
   metrics line (``Engine 000: Avg prompt throughput ...``), request lines (``Added request``,
   ``Finished request``) and access lines (``"POST /v1/chat/completions HTTP/1.1" 200 OK``),
   SpecDecoding metrics every 10 s, and at the end a stall (0.0 tokens/s with running requests,
   an RPC timeout, and a chat-serving error line that diagnose looks up in the message index).
   Anchor: a minimal Python scanner (the file read line by line, decoded, one
   compiled regex search per line for the signature set). Target: diagnose <= 1.5x its time.

Both logs are also counted by ``grep -E -c`` with the same signature set. Each tool runs as its own
process (peak RSS = its VmHWM, polled). Prints throughput, peak RSS and the ratios.

    python scripts/bench_diagnose.py [--size-mb 1024] [--serving-mb 70] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# the signature set both tools look for (grep -E alternation; diagnose keys on the same texts)
SIGNATURES = [
    "Watchdog caught collective operation timeout", "last enqueued (NCCL )?work",
    "No available (shared memory broadcast )?block found", "RPC call to [a-z_]+ timed out",
    "died unexpectedly", "NCCL WARN", "via (P2P|SHM|NET)", "NCCL version", "Init COMPLETE",
    "Traceback \\(most recent call last\\)", "ERROR [0-9]{2}-[0-9]{2}", "OutOfMemoryError",
    "Starting to load model", "Capturing CUDA graph", "init engine \\(profile",
    "Autotuning FlashInfer", "kernel_warmup", "Available KV cache memory", "world_size=",
    "vLLM is using nccl==", "Starting vLLM server on", "Engine [0-9]{3}: Avg prompt throughput",
]

TP = 8


def _worker(r: int) -> str:
    return f"Worker_TP{r}_DCP{r}"


def generate(path: Path, size_mb: int) -> tuple[int, int]:
    """Write the log; returns (bytes, lines)."""
    target = size_mb * 1024 * 1024
    n_lines = 0
    written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        def emit(rows: list[str]) -> None:
            nonlocal n_lines, written
            s = "\n".join(rows) + "\n"
            f.write(s)
            n_lines += len(rows)
            written += len(s)

        head = [
            "(APIServer pid=1) INFO 12-02 10:00:00 [utils.py:240] non-default args: {'model': "
            "'zai-org/GLM-5.1-FP8', 'tensor_parallel_size': 8, 'decode_context_parallel_size': 8, "
            "'attention_backend': 'FLASHINFER_MLA_SPARSE_SM120', 'kv_cache_dtype': 'fp8'}",
            "(EngineCore_DP0 pid=90) INFO 12-02 10:00:05 [core.py:109] Initializing a V1 LLM "
            "engine (v0.33.0) with config: model='zai-org/GLM-5.1-FP8', speculative_config=None",
        ]
        for r in range(TP):
            pid = 100 + r
            head += [
                f"(Worker pid={pid}) INFO 12-02 10:00:08 [parallel_state.py:1427] world_size=8 "
                f"rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:1 backend=nccl",
                f"node-01:{pid}:{pid} [{r}] NCCL INFO NCCL version 2.30.7+cuda13.0",
                f"node-01:{pid}:{pid + 50} [{r}] NCCL INFO comm 0x5581d0a0 rank {r} nRanks 8 "
                "nNodes 1 localRanks 8 localRank {r} MNNVL 0".replace("{r}", str(r)),
            ]
            head += [f"node-01:{pid}:{pid + 50} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> "
                     f"{(r + 1) % TP}[{(r + 1) % TP}] via P2P/CUMEM" for c in range(16)]
            head += [f"node-01:{pid}:{pid + 50} [{r}] NCCL INFO Init COMPLETE",
                     f"({_worker(r)} pid={pid}) INFO 12-02 10:00:12 [pynccl.py:111] vLLM is "
                     "using nccl==2.30.7",
                     f"({_worker(r)} pid={pid}) INFO 12-02 10:00:15 [gpu_model_runner.py:5333] "
                     "Starting to load model zai-org/GLM-5.1-FP8..."]
        emit(head)
        op = 0
        sec = 0
        while written < target - 4096:
            rows = []
            for _ in range(1000):  # ~1000 ops x 8 ranks per batch
                for r in range(TP):
                    pid = 100 + r
                    rows.append(
                        f"node-01:{pid}:{pid + 50} [{r}] NCCL INFO AllReduce: opCount {op:x} "
                        f"sendbuff 0x7f3a{op & 0xffffff:08x} recvbuff 0x7f3a{op & 0xffffff:08x} "
                        f"count 7340032 datatype 9 op 0 root 0 comm 0x5581d0a0 [nranks=8] "
                        f"stream 0x5581d0f0")
                op += 1
            sec += 1
            t = f"12-02 {10 + sec // 3600 % 14:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
            rows.append(f"(APIServer pid=1) INFO {t} [loggers.py:248] Engine 000: Avg prompt "
                        "throughput: 1520.3 tokens/s, Avg generation throughput: 88.1 tokens/s, "
                        "Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.1%")
            rows.append('(APIServer pid=1) INFO:     10.0.0.7:50334 - "POST /v1/chat/completions '
                        'HTTP/1.1" 200 OK')
            emit(rows)
        tail = []
        for k in range(3):
            tail.append(f"(EngineCore_DP0 pid=90) INFO 12-02 23:5{k}:00 [shm_broadcast.py:698] No "
                        "available shared memory broadcast block found in 60 seconds. This "
                        "typically happens when some processes are hanging or doing some "
                        "time-consuming work (e.g. compilation, weight/kv cache quantization).")
        for r in range(TP):
            seq = 4099 if r == 3 else 4100
            tail.append(f"[rank{r}]:[E1202 23:59:00.267261276 ProcessGroupNCCL.cpp:607] [Rank {r}] "
                        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                        "OpType=ALLGATHER, NumelIn=1048576, NumelOut=8388608, Timeout(ms)=600000) "
                        "ran for 600081 milliseconds before timing out.")
            tail.append(f"[rank{r}]:[E1202 23:59:00.267870 ProcessGroupNCCL.cpp:1664] [PG 3 Rank "
                        f"{r}] Exception (either an error or timeout) detected by watchdog at work: "
                        f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
        emit(tail)
    return written, n_lines


SCANNER = r"""
import re, sys
rx = re.compile(sys.argv[2])
n = 0
with open(sys.argv[1], "rb") as f:
    for raw in f:
        if rx.search(raw.decode("utf-8", "replace")):
            n += 1
print(n)
"""


def generate_serving(path: Path, size_mb: int) -> tuple[int, int]:
    """A started vLLM server's log dominated by metrics, request and access lines."""
    target = size_mb * 1024 * 1024
    n_lines = written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        def emit(rows: list[str]) -> None:
            nonlocal n_lines, written
            s = "\n".join(rows) + "\n"
            f.write(s)
            n_lines += len(rows)
            written += len(s)

        emit([
            "(APIServer pid=1) INFO 12-02 10:00:00 [utils.py:240] non-default args: {'model': "
            "'zai-org/GLM-5.1-FP8', 'tensor_parallel_size': 8, 'decode_context_parallel_size': 8}",
            "(EngineCore_DP0 pid=90) INFO 12-02 10:00:05 [core.py:109] Initializing a V1 LLM "
            "engine (v0.33.0) with config: model='zai-org/GLM-5.1-FP8', speculative_config=None",
            "(EngineCore_DP0 pid=90) INFO 12-02 10:09:00 [core.py:280] init engine (profile, "
            "create kv cache, warmup model) took 512.31 seconds",
            "(APIServer pid=1) INFO 12-02 10:09:02 [api_server.py:1900] Starting vLLM API server "
            "0 on http://0.0.0.0:8000",
            "(APIServer pid=1) INFO:     Application startup complete.",
        ])
        sec = 0
        req = 0
        while written < target - 8192:
            rows = []
            for _ in range(100):
                sec += 1
                t = f"12-02 {10 + sec // 3600 % 14:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
                for _k in range(4):
                    req += 1
                    rid = f"chatcmpl-{req:032x}"
                    rows.append(f"(APIServer pid=1) INFO {t} [logger.py:43] Received request "
                                f"{rid}: params: SamplingParams(n=1, temperature=0.6, top_p=0.95, "
                                "max_tokens=2048), lora_request: None.")
                    rows.append(f"(APIServer pid=1) INFO {t} [async_llm.py:310] Added request "
                                f"{rid}.")
                    rows.append(f'(APIServer pid=1) INFO:     10.0.{req % 250}.7:{40000 + req % 20000}'
                                ' - "POST /v1/chat/completions HTTP/1.1" 200 OK')
                    rows.append(f"(APIServer pid=1) INFO {t} [async_llm.py:420] Finished request "
                                f"{rid}.")
                rows.append(f"(APIServer pid=1) INFO {t} [loggers.py:248] Engine 000: Avg prompt "
                            f"throughput: {1500 + sec % 97}.3 tokens/s, Avg generation throughput: "
                            f"{80 + sec % 13}.1 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV "
                            "cache usage: 12.1%, Prefix cache hit rate: 41.0%")
                if sec % 10 == 0:
                    rows.append(f"(APIServer pid=1) INFO {t} [metrics.py:96] SpecDecoding metrics:"
                                " Mean acceptance length: 2.71, Accepted throughput: 61.20 "
                                "tokens/s, Drafted throughput: 107.40 tokens/s, Accepted: 612 "
                                "tokens, Drafted: 1074 tokens")
            emit(rows)
        tail = []
        for k in range(4):
            tail.append(f"(APIServer pid=1) INFO 12-02 23:5{k}:00 [loggers.py:248] Engine 000: Avg "
                        "prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
                        "Running: 4 reqs, Waiting: 2 reqs, GPU KV cache usage: 12.1%")
        tail.append("(EngineCore_DP0 pid=90) ERROR 12-02 23:55:00 [core.py:1177] RPC call to "
                    "sample_tokens timed out.")
        # an error line no catalogue entry knows (vLLM 0.33-0.34's chat serving logs it): diagnose
        # looks it up in the message index, so the index's load and lookup are in the timing
        tail.append("(APIServer pid=1) ERROR 12-02 23:55:01 [serving.py:963] Error in chat "
                    "completion stream generator.")
        emit(tail)
    return written, n_lines


def _hwm_kb(pid: int) -> int | None:
    """Peak RSS so far (VmHWM, reset by exec) of a running process, from /proc."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _run(cmd: list[str]) -> tuple[float, float, bytes, int]:
    """(seconds, peak RSS MB, stdout, rc) of one child.

    Peak RSS is the child's own VmHWM polled every 5 ms (``wait4``'s ru_maxrss would include
    the pages of the forked Python parent before exec)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunks: list[bytes] = []
    peak = 0
    reader = threading.Thread(target=lambda: chunks.append(p.stdout.read() if p.stdout else b""))
    reader.start()
    while p.poll() is None:
        kb = _hwm_kb(p.pid)
        if kb:
            peak = max(peak, kb)
        time.sleep(0.005)
    reader.join()
    dt = time.perf_counter() - t0
    return dt, peak / 1024.0, b"".join(chunks), int(p.returncode)


def _diagnose(log: Path, mb: float, label: str) -> float:
    d_s, d_rss, out, rc = _run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(log)])
    res = json.loads(out)
    top = res["findings"][0] if res["findings"] else None
    print(f"  sm120kit diagnose --json: {d_s:.2f} s, {mb / d_s:.0f} MB/s, peak RSS {d_rss:.0f} MB, "
          f"exit {rc}")
    if top:
        print(f"    top finding: [{top['category']}] {top['summary'][:110]} ranks={top['ranks']}")
    ok_rss = d_rss < 150
    print(f"    peak RSS <150 MB {'met' if ok_rss else 'MISSED'}")
    return d_s


def _grep(log: Path, mb: float) -> float | None:
    grep = shutil.which("grep")
    if not grep:
        print("  grep not found: no grep anchor")
        return None
    g_s, g_rss, gout, _grc = _run([grep, "-E", "-c", "|".join(SIGNATURES), str(log)])
    print(f"  grep -E -c ({len(SIGNATURES)} signatures): {g_s:.2f} s, {mb / g_s:.0f} MB/s, "
          f"peak RSS {g_rss:.0f} MB, {gout.decode().strip()} matching lines")
    return g_s


INDEX_LOAD = r"""
import time
t0 = time.perf_counter()
from sm120kit.diagnose.msgindex import load  # its imports (pathlib, sqlite3, re) diagnose has too
t1 = time.perf_counter()
idx = load()
n = idx.meta_value("templates")
t2 = time.perf_counter()
m = idx.match("(EngineCore_DP0 pid=90) ERROR 12-02 23:55:00 [core.py:1177] RPC call to "
              "sample_tokens timed out.")
t3 = time.perf_counter()
print(f"{(t2 - t1) * 1000:.1f} {(t1 - t0) * 1000:.1f} {(t3 - t2) * 1000:.2f} {n} {len(m)}")
"""


def _index_load() -> None:
    """The message index's load time (import + open + metadata) and one line's lookup, in a
    fresh process; diagnose loads it whenever a log records a failure line."""
    out = subprocess.run([sys.executable, "-c", INDEX_LOAD], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        print(f"[0] message index: not loadable ({out.stderr.strip().splitlines()[-1:]})")
        return
    load_ms, import_ms, match_ms, n, hits = out.stdout.split()
    ok = float(load_ms) < 50
    print(f"[0] message index: {n} templates, load {load_ms} ms (target <50 ms: "
          f"{'met' if ok else 'MISSED'}; its module's import in a bare interpreter "
          f"{import_ms} ms), one line looked up in {match_ms} ms ({hits} match(es))")


def _warm(log: Path) -> None:
    """Read the file once so every tool reads it from the page cache."""
    with open(log, "rb") as f:
        while f.read(1 << 24):
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="NCCL-flood log size")
    ap.add_argument("--serving-mb", type=int, default=70, help="serving-heavy log size")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sm120kit-bench-diagnose-"))
    _index_load()
    try:
        log = tmp / "vllm-tp8.log"
        t0 = time.perf_counter()
        nbytes, nlines = generate(log, args.size_mb)
        mb = nbytes / 1e6
        print(f"[1] NCCL flood log: {mb:.0f} MB, {nlines} lines (generated in "
              f"{time.perf_counter() - t0:.1f} s)")
        _warm(log)
        d_s = _diagnose(log, mb, "flood")
        g_s = _grep(log, mb)
        if g_s:
            print(f"  ratio diagnose/grep time: {d_s / g_s:.2f}x")
        print(f"  target >=150 MB/s: {'met' if mb / d_s >= 150 else 'MISSED'} ({mb / d_s:.0f} MB/s)")
        log.unlink()

        slog = tmp / "vllm-serving.log"
        t0 = time.perf_counter()
        nbytes, nlines = generate_serving(slog, args.serving_mb)
        smb = nbytes / 1e6
        print(f"[2] serving-heavy log: {smb:.0f} MB, {nlines} lines (generated in "
              f"{time.perf_counter() - t0:.1f} s)")
        _warm(slog)
        sd_s = _diagnose(slog, smb, "serving")
        sc_s, sc_rss, sc_out, _rc = _run([sys.executable, "-c", SCANNER, str(slog),
                                          "|".join(SIGNATURES)])
        print(f"  minimal Python scanner (readline, decode, one regex search per line): "
              f"{sc_s:.2f} s, {smb / sc_s:.0f} MB/s, peak RSS {sc_rss:.0f} MB, "
              f"{sc_out.decode().strip()} matching lines")
        sg_s = _grep(slog, smb)
        ratio = sd_s / sc_s
        print(f"  ratio diagnose/scanner time: {ratio:.2f}x (target <= 1.5x: "
              f"{'met' if ratio <= 1.5 else 'MISSED'})")
        if sg_s:
            print(f"  ratio diagnose/grep time: {sd_s / sg_s:.2f}x")
        print(f"summary: flood {mb / d_s:.0f} MB/s (target >=150); serving {ratio:.2f}x the "
              "minimal scanner (target <=1.5)")
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
