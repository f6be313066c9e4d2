"""Run vLLM's own Triton DCP index helper on a GPU and compare it with sm120kit's reference.

Usage: python crosscheck_dcp_index.py VLLM_TREE [--cases N] [--seed S]

``VLLM_TREE`` is a directory holding a vLLM release's ``vllm/`` package AND its
``vllm-X.dist-info/`` (the PyPI wheel's Python files alone are not enough: without the dist-info
vLLM cannot find its own version and disables Triton, and importing ``sparse_utils`` pulls in
vLLM's import chain — pydantic, transformers, ... — which must be on ``PYTHONPATH``).
``bash scripts/device_validate.sh --prepare`` builds both for a GPU machine without PyPI. The
helper itself is a Triton kernel, JIT-compiled by the machine's Triton. Prints one JSON object:
the cases run, the mismatches found and the release's version.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree")
    ap.add_argument("--cases", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, args.tree)

    # The wheel's compiled extensions (vllm._C*, built against the release's own torch) are not
    # carried: only the Python tree is. vLLM's CUDA platform module imports them at import time,
    # the Triton helper under test never uses them, so empty placeholder modules stand in for them.
    import importlib.util
    import types

    import torch

    from sm120kit.warmup.reference import filter_and_convert_dcp_index

    placeholders = []
    for name in ("vllm._C", "vllm._C_stable_libtorch", "vllm._moe_C", "vllm.cumem_allocator"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            sys.modules[name] = types.ModuleType(name)
            placeholders.append(name)

    t0 = time.perf_counter()
    from vllm.v1.attention.backends.mla import sparse_utils as su  # the real release's helper

    import_s = time.perf_counter() - t0
    import vllm

    gen = torch.Generator().manual_seed(args.seed)
    dev = torch.device("cuda")
    results = []
    mismatches = []
    shapes = [(1, 1), (2, 1), (2, 16), (4, 1), (4, 64), (8, 1), (8, 16), (8, 64)]
    for case in range(args.cases):
        dcp, inter = shapes[case % len(shapes)]
        block = 64
        topk = (128, 256, 2048)[case % 3]
        reqs = 1 + int(torch.randint(0, 4, (1,), generator=gen))
        tokens_per_req = 1 + int(torch.randint(0, 3, (1,), generator=gen))
        max_blocks = 64
        pool = torch.randperm(4096, generator=gen)[: reqs * max_blocks].view(reqs, max_blocks)
        block_table = pool.to(torch.int32)
        seq_lens = torch.randint(1, block * max_blocks * dcp // 2, (reqs,), generator=gen)
        req_id = torch.arange(reqs).repeat_interleave(tokens_per_req).to(torch.int32)
        T = req_id.numel()
        ti = torch.full((T, topk), -1, dtype=torch.int32)
        for t in range(T):
            s = int(seq_lens[req_id[t]])
            k = min(s, int(torch.randint(1, topk + 1, (1,), generator=gen)))
            sel = torch.randperm(s, generator=gen)[:k].to(torch.int32)
            pos = torch.randperm(topk, generator=gen)[:k]  # -1 padding interleaved anywhere
            ti[t, pos] = sel
        for rank in range(dcp):
            got_p, got_c = su.triton_filter_and_convert_dcp_index(
                req_id.to(dev), block_table.to(dev), ti.to(dev),
                dcp_size=dcp, dcp_rank=rank, cp_kv_cache_interleave_size=inter,
                BLOCK_SIZE=block, NUM_TOPK_TOKENS=topk, return_valid_counts=True,
            )
            torch.cuda.synchronize()
            ref_p, ref_c = filter_and_convert_dcp_index(
                req_id, block_table, ti, dcp_size=dcp, dcp_rank=rank,
                interleave=inter, block_size=block,
            )
            got_p, got_c = got_p.cpu(), got_c.cpu()
            ok_counts = torch.equal(got_c, ref_c)
            ok_sets = True
            for t in range(T):
                c = int(ref_c[t])
                a = sorted(got_p[t, : int(got_c[t])].tolist())
                b = sorted(ref_p[t, :c].tolist())
                tail_ok = bool((got_p[t, int(got_c[t]):] == -1).all())
                if a != b or not tail_ok:
                    ok_sets = False
                    break
            results.append({"dcp": dcp, "interleave": inter, "rank": rank, "topk": topk,
                            "tokens": T, "valid": int(ref_c.sum())})
            if not (ok_counts and ok_sets):
                mismatches.append(results[-1] | {"counts_equal": ok_counts, "sets_equal": ok_sets})
    print(json.dumps({
        "vllm": getattr(vllm, "__version__", "?"), "triton": __import__("triton").__version__,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
        "import_s": round(import_s, 2), "compiled_ext_placeholders": placeholders,
        "checks": len(results),
        "selected_slots": sum(r["valid"] for r in results), "mismatches": mismatches,
    }))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
