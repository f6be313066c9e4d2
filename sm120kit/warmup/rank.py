"""One DCP rank of ``sm120kit warmup run`` (torch): the phases, progress reports, stall injection.

Phases, each ending in a real collective (what ``--inject-stall RANK:PHASE`` stops in front of):

=========  ==================================================  ==============================
phase      work                                                collective
=========  ==================================================  ==============================
init       process group (gloo on CPU, NCCL on GPUs)           barrier (all_reduce)
kv-build   global data from the seed, this rank's cache        all_gather(local_kv_tokens)
convert    global top-k -> local physical rows + valid counts  all_gather(valid_counts)
attend     query head all-gather, local partial attention      all_gather(q heads)
merge      LSE merge: ag_rs and/or a2a (each after a barrier)  barrier, all_gather(lse) / ...
verify     single-rank attention over the dequantized KV       (none)
=========  ==================================================  ==============================

Progress goes to the parent as one JSON line per message on an inherited pipe (writes of at most
``PIPE_BUF`` bytes are atomic, so ranks never interleave); results go to a JSON file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120kit.models.fp8ds import unpack_fp8_ds_mla
from sm120kit.services.proctree import exit_with_parent
from sm120kit.services.watchdog import Watchdog
from sm120kit.warmup import workload as W
from sm120kit.warmup.collectives import MERGE_FUNCS, all_gather_cat, all_reduce_sum, query_gather
from sm120kit.warmup.config import RunConfig
from sm120kit.warmup.fi_backend import FlashInferDecode, autotune_context
from sm120kit.warmup.reference import filter_and_convert_dcp_index, sparse_mla_decode
from sm120kit.warmup.workload import global_rows_of

if TYPE_CHECKING:
    import torch

ALL_PHASES = ("init", "kv-build", "convert", "attend", "merge", "verify")
MAX_MSG = 3800  # < PIPE_BUF (4096): one os.write is atomic


def proc_title(rank: int) -> str:
    return f"sm120kit::warmup_DCP{rank}"


def log_prefix(rank: int, pid: int | None = None) -> str:
    return f"(Warmup_DCP{rank} pid={pid if pid is not None else os.getpid()})"


class Reporter:
    """Progress messages of one rank; ``fd`` None = nobody listens (local watchdog only).

    Every message but a log line moves the rank's channel (:attr:`channel`) of :attr:`watchdog`
    (the one :class:`~sm120kit.services.watchdog.Watchdog`)."""

    def __init__(self, rank: int, fd: int | None, watchdog: Watchdog | None = None) -> None:
        self.rank = rank
        self.fd = fd
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.watchdog = watchdog or Watchdog()
        self.channel = f"rank{rank}"
        self.phase: str | None = None
        self.collective: str | None = None

    def send(self, kind: str, **kw: Any) -> None:
        if kind != "log":
            self.watchdog.touch(self.channel)
        if kind == "coll":
            self.collective = kw.get("name")
        elif kind in ("phase", "tick", "phase_done"):
            self.collective = None
        if self.fd is None:
            return
        msg = {"k": kind, "r": self.rank, "pid": self.pid, "t": time.time(), **kw}
        line = json.dumps(msg, default=str)
        if len(line) > MAX_MSG:
            for key in ("text", "error"):
                if isinstance(msg.get(key), str):
                    msg[key] = msg[key][: MAX_MSG // 2] + "..."
            line = json.dumps(msg, default=str)[:MAX_MSG]
        with self.lock:
            try:
                os.write(self.fd, (line + "\n").encode())
            except OSError:
                pass  # parent gone: the parent-death watcher ends us

    def log(self, text: str) -> None:
        sys.stderr.write(f"{log_prefix(self.rank, self.pid)} {text}\n")  # one write: ranks share
        sys.stderr.flush()
        self.send("log", text=text)


def _set_title(rank: int) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(proc_title(rank))
    except ImportError:
        pass


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


class RankRun:
    """The decode step of one rank; :meth:`run` returns the result dict."""

    def __init__(self, cfg: RunConfig, rank: int, rep: Reporter) -> None:
        self.cfg = cfg
        self.rank = rank
        self.dcp = cfg.dcp
        self.rep = rep
        self.timings: dict[str, float] = {}
        self.phase = "init"
        stall = cfg.inject_stall
        self.stall_phase = stall[1] if stall is not None and stall[0] == rank else None

    # ---------------------------------------------------------------- plumbing
    def before(self, name: str) -> None:
        """Called right before every collective."""
        if self.stall_phase == self.phase:
            self.rep.log(f"inject-stall: stopping before {name} in phase {self.phase}")
            _sleep_forever()
        self.rep.send("coll", phase=self.phase, name=name)

    def tick(self, detail: str) -> None:
        self.rep.send("tick", phase=self.phase, detail=detail)

    def _barrier(self, name: str) -> None:
        import torch

        one = torch.ones(1, device=self.device)
        self.before(name)
        all_reduce_sum(one)

    def _phase(self, name: str, fn: Callable[[], Any]) -> Any:
        self.phase = name
        self.rep.send("phase", phase=name)
        t0 = time.perf_counter()
        res = fn()
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        self.timings[name] = time.perf_counter() - t0
        self.rep.send("phase_done", phase=name, dt=self.timings[name])
        return res

    # ---------------------------------------------------------------- phases
    def _init(self, init_method: str) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        cfg = self.cfg
        if cfg.device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            self.device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
            backend = cfg.resolved_dist_backend
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        if not dist.is_initialized():
            timeout = datetime.timedelta(seconds=max(600.0, 4 * cfg.stall_timeout))
            dist.init_process_group(
                backend, init_method=init_method, rank=self.rank, world_size=self.dcp,
                timeout=timeout,
            )  # fmt: skip
        self.backend = backend
        one = torch.ones(1, device=self.device)
        self.before("barrier")
        all_reduce_sum(one)
        if int(one.item()) != self.dcp:
            raise RuntimeError(f"barrier sum {one.item()} != DCP size {self.dcp}")

    def _kv_build(self) -> None:
        import torch

        cfg = self.cfg
        self.data = W.build_global(cfg)
        self.tick("global data")
        self.shard = W.build_shard(cfg, self.data, self.rank)
        self.tick("shard")
        mine = torch.tensor(self.shard.local_tokens, dtype=torch.int64, device=self.device)
        allv = all_gather_cat(
            mine, self.dcp, before=self.before, name="all_gather(local_kv_tokens)"
        )
        self.all_local_tokens = allv.cpu().tolist()
        per_req = allv.sum(0).cpu().tolist()
        if per_req != [cfg.kv_len] * cfg.batch:
            raise RuntimeError(
                f"local KV tokens sum to {per_req}, expected {cfg.kv_len} per request"
            )

    def _convert(self) -> None:
        import torch

        cfg, d = self.cfg, self.device
        self.topk = self.data.topk.to(d)
        self.phys, self.counts = filter_and_convert_dcp_index(
            self.data.req_id.to(d),
            self.shard.block_table.to(d),
            self.topk,
            dcp_size=self.dcp,
            dcp_rank=self.rank,
            interleave=cfg.interleave,
            block_size=cfg.block_size,
        )
        allc = all_gather_cat(
            self.counts, self.dcp, before=self.before, name="all_gather(valid_counts)"
        )
        self.all_counts = allc.cpu().tolist()
        selected = (self.topk >= 0).sum(1).to(torch.int64)
        if not torch.equal(allc.sum(0).to(torch.int64), selected):
            raise RuntimeError("valid counts over ranks do not add up to the selected top-k")

    def _attend(self) -> None:
        cfg, d = self.cfg, self.device
        h = cfg.heads_per_rank
        q_local = self.data.q[:, self.rank * h : (self.rank + 1) * h].to(d)
        self.q_all = query_gather(q_local, self.dcp, before=self.before)
        if cfg.backend == "flashinfer":
            dec = FlashInferDecode(d, kv_lora_rank=cfg.kv_lora_rank, rope_dim=cfg.rope_dim)
            pages = self.shard.pages.to(d)
            self.tick("flashinfer call")
            with autotune_context(cfg.autotune_cache, leader=self.rank == 0):
                self.out, self.lse = dec(
                    self.q_all, pages, self.phys, self.counts, scale=cfg.scale,
                    scale_format=cfg.scale_format, lse_base=cfg.lse_base,
                )  # fmt: skip
        else:
            lat, rope = unpack_fp8_ds_mla(
                self.shard.cache.to(d), kv_lora_rank=cfg.kv_lora_rank, rope_dim=cfg.rope_dim
            )
            self.tick("dequantized local cache")
            self.out, self.lse = sparse_mla_decode(
                self.q_all, lat, rope if cfg.rope_dim else None, self.phys, self.counts,
                softmax_scale=cfg.scale, lse_base=cfg.lse_base,
            )  # fmt: skip

    def _merge(self) -> None:
        import torch

        self.merged: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name in self.cfg.merges:
            # line the ranks up first so the timing is the merge, not the attention skew
            self._barrier(f"barrier(before {name})")
            t0 = time.perf_counter()
            self.merged[name] = MERGE_FUNCS[name](
                self.out, self.lse, self.rank, self.dcp, self.cfg.lse_base, before=self.before
            )
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.timings[f"merge_{name}"] = time.perf_counter() - t0
            self.tick(name)

    def _verify(self) -> dict[str, Any]:
        import torch

        cfg, d = self.cfg, self.device
        h = cfg.heads_per_rank
        q = self.data.q[:, self.rank * h : (self.rank + 1) * h]
        if cfg.backend == "flashinfer":
            q = q.to(torch.bfloat16).float()  # the kernel sees the BF16 query
        ref_o, ref_l = sparse_mla_decode(
            q.to(d), self.data.latent.to(d), self.data.rope.to(d) if cfg.rope_dim else None,
            global_rows_of(cfg, self.data).to(d), None, softmax_scale=cfg.scale,
            lse_base=cfg.lse_base,
        )  # fmt: skip
        errs: dict[str, Any] = {}
        scale_ref = float(ref_o.abs().max()) or 1.0
        for name, (mo, ml) in self.merged.items():
            diff = (mo.float() - ref_o).abs()
            fin = torch.isfinite(ref_l)
            same_inf = bool(
                torch.equal(torch.isinf(ml) & (ml < 0), torch.isinf(ref_l) & (ref_l < 0))
            )
            lse_err = float((ml[fin] - ref_l[fin]).abs().max()) if bool(fin.any()) else 0.0
            max_abs = float(diff.max()) if diff.numel() else 0.0
            if not (max_abs == max_abs):  # NaN
                max_abs = float("inf")
            errs[name] = {
                "max_abs": max_abs,
                "max_rel": max_abs / scale_ref,
                "lse_max_abs": lse_err,
                "empty_rows_match": same_inf,
            }
        return errs

    # ---------------------------------------------------------------- main
    def run(self, init_method: str) -> dict[str, Any]:
        import torch

        self.device = torch.device("cpu")
        t_start = time.perf_counter()
        self._phase("init", lambda: self._init(init_method))
        self._phase("kv-build", self._kv_build)
        self._phase("convert", self._convert)
        self._phase("attend", self._attend)
        self._phase("merge", self._merge)
        errs = self._phase("verify", self._verify)
        cfg = self.cfg
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "device": str(self.device),
            "process_group": self.backend,
            "timings": self.timings,
            "total_s": time.perf_counter() - t_start,
            "local_kv_tokens": self.shard.local_tokens,
            "local_kv_blocks": self.shard.local_blocks,
            "valid_counts": self.counts.cpu().tolist(),
            "all_valid_counts": self.all_counts if self.rank == 0 else None,
            "all_local_kv_tokens": self.all_local_tokens if self.rank == 0 else None,
            "errors": errs,
            "shapes": {
                "q_local": [cfg.num_tokens, cfg.heads_per_rank, cfg.kv_lora_rank + cfg.rope_dim],
                "q_gathered": list(self.q_all.shape),
                "kv_cache_pages": list(self.shard.pages.shape),
                "block_table": list(self.shard.block_table.shape),
                "topk": list(self.topk.shape),
                "partial_out": list(self.out.shape),
                "partial_lse": list(self.lse.shape),
                "merged_out": list(next(iter(self.merged.values()))[0].shape),
            },
        }


def rank_main(
    cfg: RunConfig,
    rank: int,
    *,
    init_method: str,
    fd: int | None,
    result_dir: Path,
    parent_pid: int | None,
) -> int:
    """Entry point of a forked rank; returns the exit code."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor handles Ctrl-C
    _set_title(rank)
    if parent_pid is not None:
        exit_with_parent(parent_pid, code=3)
    rep = Reporter(rank, fd)
    rep.send("start", phase="init")
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.dcp))
    run = RankRun(cfg, rank, rep)
    try:
        res = run.run(init_method)
    except Exception as exc:
        tb = traceback.format_exc()
        sys.stderr.write(f"{log_prefix(rank)} failed in phase {run.phase}:\n{tb}\n")
        sys.stderr.flush()
        (result_dir / f"error_{rank}.txt").write_text(tb)
        rep.send("error", phase=run.phase, error=f"{type(exc).__name__}: {exc}")
        return 1
    path = result_dir / f"result_{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(res))
    tmp.replace(path)
    rep.log(
        "done: "
        + ", ".join(f"{k}={v['max_abs']:.2e}" for k, v in res["errors"].items())
        + f" in {res['total_s']:.2f}s"
    )
    rep.send("result", phase="verify", path=str(path))
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    return 0
