"""Construct the release's ``FlashInferMLASparseSM120Impl`` under a real ``VllmConfig`` and run
``forward_mqa`` on CPU tensors, once per DCP rank (the DCP group is a stand-in, see standins).

Inputs (seeded, identical in every process): 3 requests with global sequence lengths
``SEQ_LENS``; their KV rows are random latents/ropes packed into real 656-byte ``fp8_ds_mla`` rows
(``sm120kit.models.fp8ds``, power-of-two scales since the impl picks ``pow2_fp32`` for a
non-GLM model); each rank's paged cache holds exactly the tokens it owns
(``owner(t) = (t // I) % N``) at ``block_table[req, local // B] * B + local % B`` with shuffled
physical block ids, every other row filled with other random packed rows. The top-k rows hold
global token ids with -1 padding at random places; three tokens are special: one whose ids all
live on rank 0 (empty on every other rank), one all -1, one with no padding at all.

Everything the tests compare with is written out (``impl_<name>.pt``): the global KV rows, the
top-k, q and each rank's ``(out, lse)``; the reference is computed in the pytest process.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rtworker.standins import Recorder, clear_groups, set_dcp_rank

SEQ_LENS = (700, 301, 1500)
TOPK = 128  # NUM_TOPK_TOKENS must be a multiple of 128 (BLOCK_N); real models use 2048
H_LOCAL = 4  # query heads per rank before the DCP query all-gather
SCALE = 0.0721
KV_LORA_RANK = 512
ROPE = 64


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    dcp: int
    interleave: int = 1
    block: int = 64
    poison_empty_rows: bool = False  # see Recorder.poison_empty_rows
    #: request of each query token; MTP batches repeat a request for its 1 + k tokens
    req_of_token: tuple[int, ...] = (0, 1, 2, 0, 1, 2)


SCENARIOS = [
    Scenario("dcp2", 2),
    Scenario("dcp4", 4),
    Scenario("dcp8", 8),
    Scenario("dcp2_i4", 2, interleave=4),
    Scenario("dcp4_b128", 4, block=128),
    Scenario("dcp4_undefined_empty_rows", 4, poison_empty_rows=True),
]
DCP1 = Scenario("dcp1", 1)


def owner(t: int, n: int, i: int) -> int:
    return (t // i) % n


def local_index(t: int, n: int, i: int) -> int:
    return (t // (n * i)) * i + t % i


def make_inputs(sc: Scenario, seed: int = 1234) -> dict[str, Any]:
    import torch

    from sm120kit.models.fp8ds import pack_fp8_ds_mla

    g = torch.Generator().manual_seed(seed)
    total = sum(SEQ_LENS)
    nope = torch.randn(total, KV_LORA_RANK, generator=g)
    rope = torch.randn(total, ROPE, generator=g)
    rows = pack_fp8_ds_mla(nope, rope, scale_format="pow2_fp32")  # [total, 656] uint8
    offsets = [0]
    for s in SEQ_LENS:
        offsets.append(offsets[-1] + s)
    r = len(SEQ_LENS)
    req_of_token = list(sc.req_of_token)
    t_count = len(req_of_token)
    topk = torch.full((t_count, TOPK), -1, dtype=torch.int32)
    for t in range(r):  # regular tokens: 3/4 of the slots used, -1 scattered
        s = SEQ_LENS[req_of_token[t]]
        ids = torch.randperm(s, generator=g)[: (3 * TOPK) // 4].to(torch.int32)
        pos = torch.randperm(TOPK, generator=g)[: ids.numel()]
        topk[t, pos] = ids
    # every id owned by rank 0: this token has no local key on ranks 1..N-1
    s0 = SEQ_LENS[req_of_token[r]]
    rank0 = torch.tensor(
        [x for x in range(s0) if owner(x, sc.dcp, sc.interleave) == 0], dtype=torch.int32
    )
    rank0 = rank0[torch.randperm(rank0.numel(), generator=g)][: TOPK // 2]
    pos = torch.randperm(TOPK, generator=g)[: rank0.numel()]
    topk[r, pos] = rank0
    # token r + 1 stays all -1; token r + 2 uses every column
    s2 = SEQ_LENS[req_of_token[r + 2]]
    topk[r + 2] = torch.randperm(s2, generator=g)[:TOPK].to(torch.int32)
    q = (torch.randn(t_count, H_LOCAL * sc.dcp, KV_LORA_RANK + ROPE, generator=g) * 0.5).to(
        torch.bfloat16
    )
    garbage = pack_fp8_ds_mla(
        torch.randn(64, KV_LORA_RANK, generator=g) * 3.0,
        torch.randn(64, ROPE, generator=g) * 3.0,
        scale_format="pow2_fp32",
    )
    return {
        "rows": rows,
        "offsets": torch.tensor(offsets, dtype=torch.int64),
        "req_of_token": torch.tensor(req_of_token, dtype=torch.int32),
        "topk": topk,
        "q": q,
        "garbage": garbage,
        "seed": seed,
    }


def local_cache(inp: dict[str, Any], sc: Scenario, rank: int, seed: int) -> dict[str, Any]:
    """This rank's paged cache ``[num_blocks, B, 656]`` and block table ``[R, max_blocks]``."""
    import torch

    n, i, b = sc.dcp, sc.interleave, sc.block
    g = torch.Generator().manual_seed(seed * 31 + rank)
    local_lens = []
    for s in SEQ_LENS:
        local_lens.append(sum(1 for t in range(s) if owner(t, n, i) == rank))
    blocks_per_req = [-(-x // b) for x in local_lens]
    max_blocks = max(blocks_per_req) + 1
    num_blocks = sum(blocks_per_req) + 3
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()  # block 0 never used
    block_table = torch.zeros((len(SEQ_LENS), max_blocks), dtype=torch.int32)
    k = 0
    for req, nb in enumerate(blocks_per_req):
        for j in range(nb):
            block_table[req, j] = perm[k]
            k += 1
    garbage = inp["garbage"]
    flat = garbage[torch.randint(0, garbage.shape[0], (num_blocks * b,), generator=g)].clone()
    rows, offsets = inp["rows"], inp["offsets"].tolist()
    for req, s in enumerate(SEQ_LENS):
        for t in range(s):
            if owner(t, n, i) != rank:
                continue
            li = local_index(t, n, i)
            phys = int(block_table[req, li // b]) * b + li % b
            flat[phys] = rows[offsets[req] + t]
    return {
        "kv_cache": flat.view(num_blocks, b, rows.shape[1]),
        "block_table": block_table,
        "local_lens": local_lens,
    }


def build_vllm_config(sc: Scenario) -> Any:
    from vllm.config import CacheConfig, DeviceConfig, ParallelConfig, VllmConfig

    pc_kwargs: dict[str, Any] = {}
    if sc.dcp > 1:
        pc_kwargs = dict(
            tensor_parallel_size=sc.dcp,
            decode_context_parallel_size=sc.dcp,
            cp_kv_cache_interleave_size=sc.interleave,
        )
    return VllmConfig(
        parallel_config=ParallelConfig(**pc_kwargs),
        cache_config=CacheConfig(block_size=sc.block, cache_dtype="fp8_ds_mla"),
        device_config=DeviceConfig(device="cpu"),
    )


def build_impl(topk: Any) -> Any:
    import importlib

    mod = importlib.import_module("vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120")
    return mod.FlashInferMLASparseSM120Impl(
        num_heads=H_LOCAL,
        head_size=KV_LORA_RANK + ROPE,
        scale=SCALE,
        num_kv_heads=1,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="fp8_ds_mla",
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
        q_lora_rank=1536,
        kv_lora_rank=KV_LORA_RANK,
        qk_nope_head_dim=128,
        qk_rope_head_dim=ROPE,
        qk_head_dim=128 + ROPE,
        v_head_dim=128,
        kv_b_proj=None,
        indexer=None,
        topk_indices_buffer=topk.clone(),
    )


def build_metadata(inp: dict[str, Any], cache: dict[str, Any], sc: Scenario) -> Any:
    """A real ``FlashInferMLASparseMetadata`` (decode-only batch, one token per row)."""
    import torch
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseMetadata

    t = inp["topk"].shape[0]
    reqs = inp["req_of_token"].tolist()
    # an MTP batch holds each request's 1 + k query tokens together: one query row per request
    per_req = [reqs.count(r) for r in sorted(set(reqs))] if reqs == sorted(reqs) else [1] * t
    qsl = [0]
    for n in per_req:
        qsl.append(qsl[-1] + n)
    values: dict[str, Any] = {
        "num_reqs": len(per_req),
        "max_query_len": max(per_req),
        "max_seq_len": max(SEQ_LENS),
        # per query row (0.26-0.29 metadata carries them; the SM120 impl does not read them)
        "seq_lens": torch.tensor(
            [SEQ_LENS[r] for r in (sorted(set(reqs)) if reqs == sorted(reqs) else reqs)],
            dtype=torch.int32,
        ),
        "num_actual_tokens": t,
        "query_start_loc": torch.tensor(qsl, dtype=torch.int32),
        "slot_mapping": torch.zeros(t, dtype=torch.int64),
        "num_decodes": len(per_req),
        "num_decode_tokens": t,
        "num_prefills": 0,
        "block_table": cache["block_table"],
        "req_id_per_token": inp["req_of_token"],
        "block_size": sc.block,
        "topk_tokens": TOPK,
        "cp_kv_cache_interleave_size": sc.interleave,
    }
    fields = {f.name: f for f in dataclasses.fields(FlashInferMLASparseMetadata)}
    missing = [
        n
        for n, f in fields.items()
        if n not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and f.init
    ]
    if missing:
        raise AssertionError(f"FlashInferMLASparseMetadata needs fields {missing}")
    return FlashInferMLASparseMetadata(**{k: v for k, v in values.items() if k in fields})


def _class_contract(impl: Any) -> dict[str, Any]:
    cls = type(impl)
    names = ("can_return_lse_for_decode", "supports_dcp", "lse_base_on_e",
             "supports_mtp_with_cp_non_trivial_interleave_size")
    return {
        "class_dict": {n: cls.__dict__.get(n, "<inherited>") for n in names},
        "class_value": {n: getattr(cls, n, None) for n in names},
        "need_to_return_lse_for_decode": impl.need_to_return_lse_for_decode,
        "dcp_world_size": impl.dcp_world_size,
        "dcp_rank": impl.dcp_rank,
        "cp_kv_cache_interleave_size": getattr(impl, "cp_kv_cache_interleave_size", None),
        "num_heads": impl.num_heads,
        "kv_scale_format": getattr(impl, "kv_scale_format", None),
        "workspace_at_init": None
        if impl._workspace_buffer is None
        else str(impl._workspace_buffer.device),
    }


def run_scenario(
    sc: Scenario, rec: Recorder, out_dir: Any, *, record_errors: bool = False
) -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config

    inp = make_inputs(sc)
    vc = build_vllm_config(sc)
    saved: dict[str, Any] = {"inputs": inp, "ranks": []}
    ranks_json = []
    for rank in range(sc.dcp):
        cache = local_cache(inp, sc, rank, inp["seed"])
        rec.reset()
        rec.poison_empty_rows = sc.poison_empty_rows
        contract: dict[str, Any] = {}
        with set_current_vllm_config(vc):
            set_dcp_rank(sc.dcp, rank)
            try:
                impl = build_impl(inp["topk"])
                contract = _class_contract(impl)
                meta = build_metadata(inp, cache, sc)
                with torch.inference_mode():
                    out, lse = impl.forward_mqa(inp["q"].clone(), cache["kv_cache"], meta, None)
            except Exception as exc:  # recorded: the upstream impl is expected to fail under DCP
                if not record_errors:
                    raise
                ranks_json.append(
                    {"rank": rank, "contract": contract, "error": f"{type(exc).__name__}: {exc}"}
                )
                continue
            finally:
                clear_groups()
        saved["ranks"].append(
            {
                "out": out.clone(),
                "lse": None if lse is None else lse.clone(),
                "launch": [dict(x) for x in rec.launch_tensors],
                "block_table": cache["block_table"],
            }
        )
        ranks_json.append(
            {
                "rank": rank,
                "contract": contract,
                "out": {"shape": list(out.shape), "dtype": str(out.dtype)},
                "lse": None
                if lse is None
                else {"shape": list(lse.shape), "dtype": str(lse.dtype)},
                "launches": list(rec.launches),
                "conversions": list(rec.conversions),
                "local_lens": cache["local_lens"],
            }
        )
    path = out_dir / f"impl_{sc.name}.pt"
    torch.save(saved, path)
    return {
        "scenario": dataclasses.asdict(sc),
        "file": str(path),
        "ranks": ranks_json,
    }


def run_all(kind: str, out_dir: Any) -> dict[str, Any]:
    rec = Recorder()
    rec.install()
    if kind == "patched":
        return {sc.name: run_scenario(sc, rec, out_dir) for sc in [DCP1, *SCENARIOS]}
    # upstream: DCP = 1 for the equality check, and DCP = 2 to show what the series fixes
    return {
        DCP1.name: run_scenario(DCP1, rec, out_dir),
        SCENARIOS[0].name: run_scenario(SCENARIOS[0], rec, out_dir, record_errors=True),
    }
