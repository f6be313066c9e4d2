"""Run inside a vLLM release tree: check validate's requests and build vLLM's own responses.

``python vllm_contract.py TREE REQUESTS.jsonl`` puts the release tree first on ``sys.path``,
imports its pydantic protocol models (they import with the packages of tests/requirements.txt:
pydantic, fastapi, transformers, torch CPU; no CUDA and no compiled vLLM extension are needed),
and prints one JSON object:

* ``problems``: every recorded request body that vLLM's ``CompletionRequest`` /
  ``TokenizeCompletionRequest`` rejects, or that carries a field the model does not declare
  (vLLM's base model accepts and ignores unknown fields, so that is checked separately);
* ``responses``: answers serialized from vLLM's own response models (``ModelList``,
  ``TokenizeResponse``, ``CompletionResponse`` with ``CompletionLogProbs``, ``ErrorResponse``),
  for the test to parse with validate's parsers;
* ``unauthorized``: the body vLLM's API-key middleware writes with its 401, read from its source.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any


def _first(*names: str) -> Any:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {names}")


def _fields(model: Any) -> set[str]:
    out = set()
    for name, f in model.model_fields.items():
        out.add(name)
        if f.alias:
            out.add(f.alias)
    return out


def check(models: dict[str, Any], records: list[dict[str, Any]]) -> tuple[list[str], int]:
    problems, n = [], 0
    for rec in records:
        model = models.get(rec["path"])
        if model is None:
            problems.append(f"no vLLM request model for {rec['path']}")
            continue
        n += 1
        unknown = sorted(set(rec["body"]) - _fields(model))
        if unknown:
            problems.append(f"{rec['path']}: fields vLLM does not declare: {unknown}")
        try:
            model.model_validate(rec["body"])
        except Exception as exc:  # pydantic.ValidationError or vLLM's own validation error
            problems.append(f"{rec['path']}: {type(exc).__name__}: {exc}")
    return problems, n


def responses(engine: Any, comp: Any, tok: Any) -> dict[str, Any]:
    lp = comp.CompletionLogProbs(text_offset=[0, 1], token_logprobs=[-0.25, -1.5],
                                 tokens=["token_id:65", "token_id:66"],
                                 top_logprobs=[{"token_id:65": -0.25, "token_id:67": -2.0},
                                               {"token_id:66": -1.5, "token_id:65": -1.75}])
    choice = comp.CompletionResponseChoice(index=0, text="AB", logprobs=lp, finish_reason="length")
    usage = engine.UsageInfo(prompt_tokens=3, completion_tokens=2, total_tokens=5)
    out = {
        "models": engine.ModelList(data=[engine.ModelCard(id="m", max_model_len=4096)]),
        "tokenize": tok.TokenizeResponse(count=3, max_model_len=4096, tokens=[1, 2, 3]),
        "completion": comp.CompletionResponse(model="m", choices=[choice], usage=usage),
        "error": engine.ErrorResponse(error=engine.ErrorInfo(
            message="This model's maximum context length is 4096 tokens.",
            type="BadRequestError", param="prompt", code=400)),
    }
    return {k: json.loads(v.model_dump_json()) for k, v in out.items()}


def unauthorized(tree: Path) -> list[str]:
    found = []
    for path in (tree / "vllm" / "entrypoints").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found += re.findall(r"JSONResponse\(content=(\{[^}]*\}), status_code=401\)", text)
    return found


def main() -> None:
    tree, recorded = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(tree))
    comp = importlib.import_module("vllm.entrypoints.openai.completion.protocol")
    tok = importlib.import_module("vllm.entrypoints.serve.tokenize.protocol")
    engine = _first("vllm.entrypoints.serve.engine.protocol",
                    "vllm.entrypoints.openai.engine.protocol")
    assert Path(comp.__file__).is_relative_to(tree), comp.__file__  # the release, not another vLLM
    records = [json.loads(x) for x in recorded.read_text().splitlines() if x.strip()]
    problems, n = check({"/v1/completions": comp.CompletionRequest,
                         "/tokenize": tok.TokenizeCompletionRequest}, records)
    print(json.dumps({"checked": n, "problems": problems,
                      "responses": responses(engine, comp, tok),
                      "unauthorized": unauthorized(tree)}))


if __name__ == "__main__":
    main()
