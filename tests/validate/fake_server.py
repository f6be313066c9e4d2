"""A small OpenAI-compatible HTTP server for validate's tests (a real process on 127.0.0.1).

It serves :class:`tiny_model.TinyModel` (the project's reference DCP math; no SM120 GPU here) with
vLLM's endpoint shapes: ``GET /v1/models`` (with ``max_model_len``), ``POST /tokenize``
(``count``, ``tokens``, ``max_model_len``), ``POST /v1/completions`` (greedy, legacy ``logprobs``
with ``tokens``/``token_logprobs``/``top_logprobs``) and ``GET /metrics``. Failure modes for the
error-path tests: ``--no-logprobs``, ``--not-json``, ``--delay``.

Prints ``PORT <n>`` on stdout once listening (``--port 0`` picks a free port).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from tiny_model import TinyModel, encode, token_str  # noqa: E402

STARTED = time.time()  # what prometheus_client reports as process_start_time_seconds


def record(file: str | None, path: str, body: dict[str, Any]) -> None:
    if file:
        with open(file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"path": path, "body": body}) + "\n")


SCORE_WINDOW = 40  # prompt positions scored by the tiny model (validate scores <= 33: max_tokens+1)


def _tok(i: int, as_id: bool) -> str:
    return f"token_id:{i}" if as_id else token_str(i)


def _prompt_scores(model: TinyModel, toks: list[int], k: int,
                   as_id: bool) -> tuple[list[float | None], list[dict[str, float] | None]]:
    """vLLM's prompt logprobs (echo): none for the first token, then each prompt token's logprob
    given the tokens before it, with the top-k (and the token itself). The tiny model runs one
    decode step per position (~50 ms on CPU), so only the last SCORE_WINDOW positions are scored
    and the earlier ones are null: an SM120 GPU scores all of them in one prefill; validate
    compares the continuation, which lies in the window."""
    vals: list[float | None] = [None] * len(toks)
    tops: list[dict[str, float] | None] = [None] * len(toks)
    for i in range(max(1, len(toks) - SCORE_WINDOW), len(toks)):
        lp = model.next_logprobs(toks[:i])
        v, ids = torch.topk(lp, k)
        top = {_tok(int(j), as_id): float(x) for j, x in zip(ids, v, strict=True)}
        top[_tok(toks[i], as_id)] = float(lp[toks[i]])
        vals[i], tops[i] = float(lp[toks[i]]), top
    return vals, tops


def _prompts(req: dict[str, Any]) -> list[list[int]]:
    p = req["prompt"]
    if isinstance(p, str):
        return [encode(p)]
    if p and all(isinstance(x, int) for x in p):
        return [list(p)]  # one prompt of token ids
    return [encode(x) if isinstance(x, str) else list(x) for x in p]


def _choice(model: TinyModel, req: dict[str, Any], toks: list[int], n: int, k: int,
            mode: str) -> dict[str, Any]:
    as_id = bool(req.get("return_tokens_as_token_ids"))
    steps = model.generate(toks, n, max(k, 1))
    text = "".join(token_str(t) for t, _, _ in steps)
    lp = None
    if req.get("logprobs") is not None and mode != "nologprobs":
        ids = [t for t, _, _ in steps]
        vals: list[float | None] = [v for _, v, _ in steps]
        tops: list[dict[str, float] | None] = [
            {_tok(i, as_id): v for i, v in top.items()} for _, _, top in steps]
        if req.get("echo"):
            pv, pt = _prompt_scores(model, toks, k, as_id)
            ids, vals, tops = toks + ids, pv + vals, pt + tops
            text = "".join(token_str(t) for t in toks) + text
        lp = {"tokens": [_tok(i, as_id) for i in ids], "token_logprobs": vals,
              "top_logprobs": tops, "text_offset": list(range(len(ids)))}
    return {"text": text, "logprobs": lp, "finish_reason": "length"}


def completion(model: TinyModel, args: argparse.Namespace, req: dict[str, Any],
               mode: str) -> tuple[int, dict[str, Any]]:
    """(200, vLLM's CompletionResponse) or (400, the message and param of vLLM's error)."""
    n = int(req.get("max_tokens") or 16)
    k = int(req.get("logprobs") or 0)
    if k > args.max_logprobs:
        return 400, {"message": f"Requested sample logprobs of {k}, which is greater than max "
                                f"allowed: {args.max_logprobs}", "param": "logprobs"}
    choices = []
    for idx, toks in enumerate(_prompts(req)):
        if len(toks) + n > args.max_model_len:
            return 400, {"message": f"This model's maximum context length is "
                                    f"{args.max_model_len} tokens. However, your request has "
                                    f"{len(toks)} input tokens and requests {n} output tokens. "
                                    "Please reduce the length of the input messages.",
                         "param": "prompt"}
        choices.append({"index": idx, **_choice(model, req, toks, n, k, mode)})
    return 200, {"id": "cmpl-0", "object": "text_completion", "model": args.model_name,
                 "choices": choices}


def make_handler(model: TinyModel, args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    name = args.model_name
    served = [0]
    counts = {"requests": 0, "prompt_tokens": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        mode = ""

        def _route(self) -> str:
            for m in ("nologprobs", "notjson", "slow"):
                if self.path.startswith(f"/{m}/"):
                    self.mode = m
                    return self.path[len(m) + 1:]
            return self.path

        def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if self.mode == "notjson":
                data, ctype = b"<html><body>502 Bad Gateway</body></html>", "text/html"
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("content-length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def _error(self, code: int, message: str, param: str | None = None) -> None:
            """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}."""
            kind = {400: "BadRequestError", 404: "NotFoundError"}.get(code, "InternalServerError")
            self._send(code, {"error": {"message": message, "type": kind, "param": param,
                                        "code": code}})

        def _denied(self, path: str) -> bool:
            """vLLM's --api-key middleware: /v1/* needs the Bearer key, else 401."""
            if not args.api_key or not path.startswith("/v1"):
                return False
            if self.headers.get("Authorization") == f"Bearer {args.api_key}":
                return False
            self._send(401, {"error": "Unauthorized"})
            return True

        def do_GET(self) -> None:
            path = self._route()
            if self._denied(path):
                return
            if self.mode == "slow":
                time.sleep(5)
            if path == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "max_model_len": args.max_model_len}]})
            elif path == "/metrics" and not args.no_metrics:
                # vLLM's per-engine counters (v1/metrics/loggers.py) and prometheus_client's
                # process start, which has a resolution of one clock tick (10 ms)
                labels = f'engine="0",model_name="{name}"'
                started = args.start_time if args.start_time is not None else STARTED
                text = (f'vllm:cache_config_info{{block_size="64",num_gpu_blocks="{args.blocks}"}}'
                        f" 1.0\nprocess_start_time_seconds {started:.2f}\n"
                        f'vllm:request_success_total{{{labels},finished_reason="length"}} '
                        f"{counts['requests']:.1f}\n"
                        f"vllm:prompt_tokens_total{{{labels}}} {counts['prompt_tokens']:.1f}\n")
                self._send(200, text.encode(), "text/plain")
            else:
                self._error(404, f"no route {path}")

        def do_POST(self) -> None:
            path = self._route()
            if self.mode == "slow":
                time.sleep(5)
            req = self._body()
            record(args.record, path, req)
            if self._denied(path):
                return
            if path == "/tokenize":
                toks = encode(req.get("prompt", ""))
                if req.get("add_special_tokens") is False:
                    toks = toks[1:]  # vLLM's add_special_tokens=False: no BOS
                self._send(200, {"count": len(toks), "max_model_len": args.max_model_len,
                                 "tokens": toks})
            elif path == "/v1/completions":
                served[0] += 1
                if args.hang_after and served[0] > args.hang_after:
                    time.sleep(3600)  # a wedged engine: the request never returns
                self._complete(req)
            else:
                self._error(404, f"no route {path}")

        def _complete(self, req: dict[str, Any]) -> None:
            code, body = completion(model, args, req, self.mode)
            if code != 200:
                self._error(code, body["message"], body["param"])
            else:
                prompts = req.get("prompt")
                batch = prompts if isinstance(prompts, list) and prompts and not isinstance(
                    prompts[0], int) else [prompts]
                counts["requests"] += len(batch)
                counts["prompt_tokens"] += sum(
                    len(p) if isinstance(p, list) else len(encode(p or "")) for p in batch)
                self._send(200, body)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="tiny-induction")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    # the vLLM options validate reads from a launch line, with the fake's meaning
    ap.add_argument("--dcp", "--decode-context-parallel-size", dest="dcp", type=int, default=1)
    ap.add_argument("--cp-kv-cache-interleave-size", dest="interleave", type=int, default=None)
    ap.add_argument("--block-size", type=int, default=64)
    # fake-only: how KV is written and read, the merge base, and a hang for the bundle test
    ap.add_argument("--store-interleave", type=int, default=None)
    ap.add_argument("--read-interleave", type=int, default=None)
    ap.add_argument("--merge-base", choices=("2", "e"), default="2")
    ap.add_argument("--topk", type=int, default=256, help="indexer top-k (>= context: dense)")
    ap.add_argument("--drop-rank", type=int, default=None, help="merge without this rank")
    ap.add_argument("--rank-dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--hang-after", type=int, default=0, help="stop answering after N requests")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))
    ap.add_argument("--max-logprobs", type=int, default=20)
    ap.add_argument("--start-time", type=float, default=None,
                    help="process_start_time_seconds to report (two servers started in one tick)")
    ap.add_argument("--no-metrics", action="store_true",
                    help="no /metrics (404), as an OpenAI-compatible stand-in without Prometheus")
    ap.add_argument("--record", help="append every POST body (JSON lines) to this file")
    args = ap.parse_args()
    args.model_name = args.model
    torch.set_num_threads(1)  # tiny tensors: threads only contend on a shared CI box
    inter = args.interleave or 64
    model = TinyModel(dcp=args.dcp, store_interleave=args.store_interleave or inter,
                      read_interleave=args.read_interleave or inter, merge_base=args.merge_base,
                      topk=args.topk, drop_rank=args.drop_rank, rank_dtype=args.rank_dtype)
    srv = ThreadingHTTPServer((args.host, args.port), make_handler(model, args))
    # what vLLM prints at startup (gpu_worker / kv_cache_utils / uvicorn), with the fake's numbers
    tokens = args.blocks * 64 * args.dcp
    print(f"INFO [gpu_worker.py:298] Available KV cache memory: {0.5 * args.dcp:.2f} GiB\n"
          f"INFO [kv_cache_utils.py:1087] GPU KV cache size: {tokens:,} tokens, Maximum "
          f"concurrency for {args.max_model_len:,} tokens per request: "
          f"{tokens / args.max_model_len:.2f}x\n"
          "INFO:     Application startup complete.", file=sys.stderr, flush=True)
    print(f"PORT {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
