"""Worker for test_v026_029_runtime.py: run one release's real ``run_mixed_prefill_decode_warmup``.

Started as ``python rt_warmup_worker.py`` with ``PYTHONPATH`` = the release tree (patched or
upstream), the no-deps dir and ``tests/runtime`` (for ``rtworker``'s minimal runner built from
real ``VllmConfig`` / ``KVCacheConfig`` objects). Prints one ``SM120KIT-RESULT <json>`` line.
"""

from __future__ import annotations

import copy
import json
from typing import Any


def main() -> None:
    from rtworker import warmup_case
    from rtworker.canon import canon
    from vllm.v1.worker.gpu import warmup

    out: list[dict[str, Any]] = []
    for dcp, block, mml, mnbt, num_tokens in warmup_case.MAIN_CASES + warmup_case.CLAMP_CASES:
        runner, connector = warmup_case.build_runner(dcp, block, mml, mnbt)
        calls: list[Any] = []

        def execute_model(so: Any, calls: list[Any] = calls) -> None:
            calls.append(canon(copy.deepcopy(so)))

        def sample_tokens(grammar: Any, calls: list[Any] = calls) -> None:
            calls.append({"sample_tokens": canon(grammar)})

        ret = warmup.run_mixed_prefill_decode_warmup(runner, execute_model, sample_tokens,
                                                     num_tokens)
        out.append({
            "case": [dcp, block, mml, mnbt, num_tokens],
            "returned": ret,
            "calls": calls,
            "reads": sorted(object.__getattribute__(runner, "_reads")),
            "connector": connector.calls,
        })
    print("SM120KIT-RESULT " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
