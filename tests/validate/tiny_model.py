"""A tiny attention "model" whose decode step runs the project's reference DCP math.

No SM120 GPU (nor a real LLM) exists here, so tests stand up this model behind a real HTTP server.
It is one attention layer of induction heads over a character vocabulary, computed with
:mod:`sm120kit.warmup.reference` exactly as a DCP decode step runs:

* the KV of token ``t`` is written to rank ``(t // I_store) % N`` at its local row, through a
  per-rank block table (blocks of 64 rows, physically shuffled);
* each decode step, every rank converts the global top-k token ids into its own physical rows with
  ``filter_and_convert_dcp_index`` (interleave ``I_read``), runs ``sparse_mla_decode`` (LSE base 2,
  as FlashInfer's SM120 kernels write it) and the ranks' partials are merged with
  ``lse_merge_a2a`` (base ``merge_base``).

The two silent errors of field-notes §5 are two arguments: ``merge_base="e"`` (LSE written base 2,
merged base e) and ``read_interleave=1`` while KV was written with interleave 64.

Model: latent row ``j`` = [one key per head | one-hot of token j]; head ``h``'s key is a unit
vector of the ``n_h`` characters before ``j`` (sum of random per-(offset, char) vectors), its query
the same vector of the last ``n_h`` characters, scaled. Softmax attention therefore finds where the
current context occurred before and reads the token that followed: an induction head, which
retrieves a needle from anywhere in the context. The next-token distribution is the mean of the
heads' value mixtures, lightly smoothed.
"""

from __future__ import annotations

import math

import torch

from sm120kit.warmup import reference as ref

BOS = 0
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
VOCAB = len(CHARS) + 1  # + BOS
_ID = {c: i + 1 for i, c in enumerate(CHARS)}
NGRAMS = (1, 3, 6, 12)  # context length per head
SCALES = (3.0, 6.0, 10.0, 16.0)  # softmax temperature per head (nats at an exact match)
DK = 48  # key dims per head
BLOCK = 64
GAIN = 1.0
LAYERS = 4
TOPK = 256  # GLM-5 / DeepSeek-V3.2 select 2048; smaller here keeps contexts short


def encode(text: str) -> list[int]:
    return [BOS] + [_ID.get(c, _ID["?"]) for c in text]


def token_str(i: int) -> str:
    return "" if i == BOS else CHARS[i - 1]


def token_id(s: str) -> int:
    return _ID.get(s, _ID["?"])


class TinyModel:
    def __init__(self, *, dcp: int = 1, store_interleave: int = 64, read_interleave: int = 64,
                 merge_base: str = "2", seed: int = 1234, topk: int = TOPK,
                 drop_rank: int | None = None, rank_dtype: str = "bf16") -> None:
        g = torch.Generator().manual_seed(seed)
        self.dcp, self.store_i, self.read_i, self.base = dcp, store_interleave, read_interleave, merge_base
        # E[h][offset, char] random unit vectors
        self.emb = [torch.nn.functional.normalize(torch.randn(n, VOCAB, DK, generator=g), dim=-1)
                    for n in NGRAMS]
        self.heads = len(NGRAMS) * dcp  # DCP all-gathers queries: N x the heads of one rank
        self.rdim = len(NGRAMS) * DK + VOCAB
        self.perm_seed = seed
        # indexer top-k (a context longer than it is sparse), a rank whose partial the merge
        # never receives (injected error), and the rank outputs' precision
        self.topk, self.drop_rank = topk, drop_rank
        self.rank_dtype = torch.bfloat16 if rank_dtype == "bf16" else torch.float32

    # --- keys / queries ------------------------------------------------------------------------

    def _keys(self, toks: torch.Tensor, h: int) -> torch.Tensor:
        """[T, DK]: row j's key = unit vector of the ``n_h`` tokens before j."""
        n = NGRAMS[h]
        k = torch.zeros(toks.shape[0], DK)
        for o in range(1, n + 1):
            if o < toks.shape[0]:
                k[o:] += self.emb[h][o - 1][toks[:-o]]
        return torch.nn.functional.normalize(k, dim=-1)

    def _rows(self, toks: torch.Tensor) -> torch.Tensor:
        keys = [self._keys(toks, h) for h in range(len(NGRAMS))]
        onehot = torch.nn.functional.one_hot(toks, VOCAB).float()
        return torch.cat([*keys, onehot], dim=1)

    def _query(self, toks: torch.Tensor) -> torch.Tensor:
        """[heads, rdim]: head h of every rank copy looks for the last n_h tokens."""
        ext = torch.cat([toks, torch.zeros(1, dtype=toks.dtype)])  # the key slot of position T
        q = torch.zeros(self.heads, self.rdim)
        for k in range(self.heads):
            h = k % len(NGRAMS)
            q[k, h * DK:(h + 1) * DK] = SCALES[h] * self._keys(ext[-NGRAMS[h] - 1:], h)[-1]
        return q

    # --- the DCP decode step ---------------------------------------------------------------------

    def _shard(self, rows: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per rank: physical KV rows (written with the store interleave) and its block table."""
        n, i = self.dcp, self.store_i
        t = torch.arange(rows.shape[0])
        owner = (t // i) % n
        local = (t // (n * i)) * i + t % i
        caches, tables = [], []
        for r in range(n):
            mine = owner == r
            nblocks = int(local[mine].max()) // BLOCK + 2 if bool(mine.any()) else 1
            perm = torch.randperm(nblocks, generator=torch.Generator().manual_seed(self.perm_seed + r))
            cache = torch.zeros(nblocks * BLOCK, self.rdim)
            lo = local[mine]
            cache[perm[lo // BLOCK] * BLOCK + lo % BLOCK] = rows[mine]
            caches.append(cache)
            tables.append(perm.to(torch.int32).unsqueeze(0))
        return caches, tables

    def _attend(self, q: torch.Tensor, caches: list[torch.Tensor],
                phys: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """One DCP attention layer: per-rank partials (BF16 out, base-2 LSE), LSE merge."""
        outs, lses = [], []
        for r in range(self.dcp):
            o, lse = ref.sparse_mla_decode(q, caches[r], None, phys[r][0], phys[r][1],
                                           softmax_scale=1.0, lse_base="2")
            if r == self.drop_rank:  # its all-to-all slot never written: zeros, LSE -inf
                o, lse = torch.zeros_like(o), torch.full_like(lse, float("-inf"))
            outs.append(o.to(self.rank_dtype).float())  # the kernels write BF16 outputs
            lses.append(lse)
        merged, _ = ref.lse_merge_a2a(outs, lses, base=self.base)
        return torch.cat(merged, dim=1)[0]  # [H_total, R]: rank r owns heads [r*h, (r+1)*h)

    def next_logprobs(self, toks: list[int], rows: torch.Tensor | None = None) -> torch.Tensor:
        """log p(next token | toks), [VOCAB], via the sharded decode step (``rows``: the latent
        rows of ``toks`` when the caller keeps them)."""
        tt = torch.tensor(toks, dtype=torch.int64)
        if rows is None:
            rows = self._rows(tt)
        q = self._query(tt).unsqueeze(0)  # [1, H, R]
        # the indexer: the TOPK positions with the highest score of any head (all when fewer)
        kk = self.topk
        topk = torch.full((1, kk), -1, dtype=torch.int32)
        if len(toks) <= kk:
            topk[0, :len(toks)] = torch.arange(len(toks), dtype=torch.int32)
        else:
            score = (rows @ q[0, : len(NGRAMS)].T).max(dim=1).values
            topk[0] = torch.topk(score, kk).indices.sort().values.to(torch.int32)
        caches, tables = self._shard(rows)
        tables_phys = []
        for r in range(self.dcp):
            tables_phys.append(ref.filter_and_convert_dcp_index(
                torch.zeros(1, dtype=torch.int32), tables[r], topk, dcp_size=self.dcp, dcp_rank=r,
                interleave=self.read_i, block_size=BLOCK))
        nh = len(NGRAMS)
        base_q = q.clone()
        for _layer in range(LAYERS):
            heads = self._attend(q, caches, tables_phys)
            # residual stream: each head's query moves toward the keys it attended (MLA: keys and
            # values are one latent, so the output carries them), and the next layer looks again
            nq = torch.zeros_like(q)
            for k in range(self.heads):
                h = k % nh
                sl = slice(h * DK, (h + 1) * DK)
                nq[0, k, sl] = SCALES[h] * torch.nn.functional.normalize(
                    base_q[0, k, sl] / SCALES[h] + heads[k % heads.shape[0], sl], dim=0)
            q = nq
        mix = heads[: len(NGRAMS), len(NGRAMS) * DK:].clamp(min=0).mean(dim=0)
        p = 0.97 * mix / mix.sum().clamp(min=1e-9) + 0.03 / VOCAB
        p[BOS] = 1e-9
        return torch.log_softmax(GAIN * torch.log(p), dim=0)

    def generate(self, toks: list[int], max_tokens: int, k: int) -> list[tuple[int, float, dict[int, float]]]:
        out = []
        toks = list(toks)
        rows = self._rows(torch.tensor(toks, dtype=torch.int64))
        for _ in range(max_tokens):
            lp = self.next_logprobs(toks, rows)
            vals, ids = torch.topk(lp, k)
            best = int(ids[0])
            out.append((best, float(lp[best]),
                        {int(i): float(v) for i, v in zip(ids, vals, strict=True)}))
            toks.append(best)
            tail = torch.tensor(toks[-max(NGRAMS) - 1:], dtype=torch.int64)
            rows = torch.cat([rows, self._rows(tail)[-1:]])  # the new token's row only
        return out


def nats(x: float) -> float:
    return x if math.isfinite(x) else -1e9
