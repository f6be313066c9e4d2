"""A stand-in for `vllm serve` on a machine without an SM120 GPU: it prints vLLM's real log lines
(format strings of vLLM 0.25.1: shm_broadcast.py, gpu_worker.py, kv_cache_utils.py, uvicorn's
startup line) while doing real work of the kind a cold start does, in real processes:

* ``compile``: real C compiles (``cc -O2``) in child processes, and ``nvcc -arch=sm_120``
  where the CUDA toolkit is installed, for ``--seconds``, printing only the shm_broadcast wait;
* ``weights``: reads a large sparse file as its "weights" for ``--seconds``, printing only the
  shm_broadcast wait;
* ``hang``: blocks with no output and no children;
* ``spin``: burns a CPU in a Python loop with no output;
* ``load-spin``: prints vLLM's "Starting to load model" line, then burns a CPU in one Python
  frame with nothing else moving (a CUDA kernel that never returns, seen from the CPU side);
* ``load-slow``: prints that line, then reads 8 MiB of ``--file`` at growing intervals
  (``--gaps``), the last ones longer than the stall timeout, then becomes ready;
* ``compile-timeout``: compiles, then prints vLLM 0.34's engine-ready TimeoutError (its
  ``core_client.py`` text) as a cold JIT past ``VLLM_ENGINE_READY_TIMEOUT_S`` does.

Only the engine is faked (no GPU here). ``--mark FILE`` gets the unix time the quiet part
begins (the test measures detection latency from it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

PID = os.getpid()
PRE = f"(EngineCore_DP0 pid={PID}) INFO 07-15 10:2{{m}}:{{s:02d}} "
SHM = ("[shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds. "
       "This typically happens when some processes are hanging or doing some time-consuming "
       "work (e.g. compilation, weight/kv cache quantization).")


def say(text: str) -> None:
    t = time.localtime()
    print(PRE.format(m=t.tm_min % 10, s=t.tm_sec) + text, flush=True)


def startup(model: str, dcp: int) -> None:
    print(f"(APIServer pid={PID}) INFO 07-15 10:20:01 [utils.py:253] non-default args: "
          f"{{'model_tag': '{model}', 'model': '{model}', 'tensor_parallel_size': {max(4, dcp)}, "
          f"'decode_context_parallel_size': {dcp}, 'kv_cache_dtype': 'fp8'}}", flush=True)
    say("[core.py:97] Initializing a V1 LLM engine (v0.25.1) with config: model='zai-org/GLM-5'")
    say("[parallel_state.py:1200] rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, "
        "TP rank 0, EP rank 0")


def ready() -> None:
    say("[gpu_worker.py:539] Available KV cache memory: 8.25 GiB")
    say("[kv_cache_utils.py:2146] GPU KV cache size: 164,160 tokens")
    say("[kv_cache_utils.py:2148] Maximum concurrency for 131,072 tokens per request: 1.25x")
    print(f"(APIServer pid={PID}) INFO:     Application startup complete.", flush=True)


C_SRC = "\n".join(
    f"double f{i}(double x) {{ double s = 0; for (int k = 0; k < {50 + i}; k++) "
    f"s += x * k / (k + {i} + 1.0); return s; }}" for i in range(400)) + "\n"
CU_SRC = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"


def compile_for(seconds: float, shm_every: float) -> None:
    work = tempfile.mkdtemp(prefix="fake-jit-")
    src = os.path.join(work, "k.c")
    with open(src, "w") as fh:
        fh.write(C_SRC)
    cu = os.path.join(work, "k.cu")
    with open(cu, "w") as fh:
        fh.write(CU_SRC)
    nvcc = shutil.which("nvcc")
    end = time.monotonic() + seconds
    last = 0.0
    i = 0
    try:
        while time.monotonic() < end:
            if nvcc and i % 3 == 2:
                cmd = [nvcc, "-arch=sm_120", "-c", cu, "-o", os.path.join(work, f"k{i}.o")]
            else:
                cmd = ["cc", "-O2", "-c", src, "-o", os.path.join(work, f"k{i}.o")]
            p = subprocess.Popen(cmd)
            while p.poll() is None:
                if time.monotonic() - last > shm_every:
                    say(SHM)
                    last = time.monotonic()
                time.sleep(0.1)
            if p.returncode:
                raise SystemExit(f"compile failed: {cmd}")
            i += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"compiled {i} objects", file=sys.stderr, flush=True)


def read_weights(path: str, seconds: float, shm_every: float) -> None:
    end = time.monotonic() + seconds
    last = 0.0
    total = 0
    with open(path, "rb", buffering=0) as fh:
        while time.monotonic() < end:
            chunk = fh.read(32 << 20)
            if not chunk:
                fh.seek(0)
                continue
            total += len(chunk)
            if time.monotonic() - last > shm_every:
                say(SHM)
                last = time.monotonic()
            time.sleep(0.05)
    print(f"read {total} bytes", file=sys.stderr, flush=True)


def load_line(model: str) -> None:
    say(f"[gpu_model_runner.py:2602] Starting to load model {model}...")


def read_at(path: str, gaps: list[float]) -> None:
    with open(path, "rb", buffering=0) as fh:
        for g in gaps:
            time.sleep(g)
            fh.read(8 << 20)


def spin() -> None:
    x = 0
    while True:
        x = (x * 31 + 7) % 1000003


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["compile", "weights", "hang", "spin", "compile-timeout",
                                     "load-spin", "load-slow"])
    ap.add_argument("--gaps", default="0.5,0.5,0.5,1,1,2,3,4.5,4.5")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--shm-every", type=float, default=1.0)
    ap.add_argument("--file")
    ap.add_argument("--mark")
    ap.add_argument("--model", default="zai-org/GLM-5")
    ap.add_argument("--decode-context-parallel-size", dest="dcp", type=int, default=1)
    a = ap.parse_args()
    startup(a.model, a.dcp)
    if a.mode.startswith("load-"):
        load_line(a.model)
    if a.mark:
        with open(a.mark, "w") as fh:
            fh.write(repr(time.time()))
    if a.mode == "compile":
        compile_for(a.seconds, a.shm_every)
    elif a.mode == "compile-timeout":  # vLLM's engine-ready timeout fires during the JIT
        compile_for(a.seconds, a.shm_every)
        print(f"(APIServer pid={PID}) ERROR 07-15 10:30:01 [core_client.py:795] TimeoutError: "
              "Timed out waiting for engine core processes to start. This is often caused by "
              "slow weight loading for large models. Waited 600s (configured by "
              "VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment "
              "variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>", flush=True)
        time.sleep(3600)
    elif a.mode == "weights":
        read_weights(a.file, a.seconds, a.shm_every)
    elif a.mode == "hang":
        time.sleep(3600)
    elif a.mode == "load-slow":
        read_at(a.file, [float(g) for g in a.gaps.split(",")])
    else:
        spin()
    ready()
    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
