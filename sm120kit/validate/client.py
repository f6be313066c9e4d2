"""The HTTP side of ``validate``: an OpenAI-compatible (vLLM) server through ``httpx``.

Only what validate needs: ``/v1/models`` (model id, vLLM's ``max_model_len``), vLLM's ``/tokenize``
(token counts by the server's own tokenizer), greedy ``/v1/completions`` with top-k ``logprobs``,
and ``/metrics`` (Prometheus text, optional). Every transport or protocol problem becomes one
:class:`~sm120kit.errors.UserError` line naming the server, the path and what went wrong.
``httpx`` is imported when a client is made, so the rest of the package imports without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sm120kit.errors import UserError

INSTALL_HINT = "install the HTTP client: pip install 'sm120kit[validate]' (httpx)"
CONNECT_TIMEOUT = 10.0  # seconds to open a TCP connection (a live host answers in milliseconds)
#: seconds for the first byte of the quick endpoints (``/v1/models``, ``/tokenize``, ``/metrics``):
#: a ready vLLM API server answers them from its own process in milliseconds, whatever the engine
#: is doing; only generation (``/v1/completions``) waits under ``--timeout``
SHORT_TIMEOUT = 10.0
QUICK_PATHS = ("/v1/models", "/tokenize", "/metrics")
KEY_HINT = "vLLM's --api-key (or VLLM_API_KEY) guards /v1/*: pass the same key to validate"


@dataclass
class Completion:
    """One greedy completion: generated tokens, their logprobs and the top-k per position."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    top: list[dict[str, float]] = field(default_factory=list)
    finish_reason: str | None = None


def normalize_url(url: str) -> str:
    u = url.strip().rstrip("/")
    if "://" not in u:
        u = "http://" + u
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return u


def _short(text: str, n: int = 80) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


class ServerClient:
    """A vLLM OpenAI-compatible server at ``url``; ``label`` names it in error messages."""

    def __init__(self, url: str, *, label: str = "server", timeout: float = 600.0,
                 model: str | None = None, api_key: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 short_timeout: float = SHORT_TIMEOUT) -> None:
        try:
            import httpx
        except ImportError as exc:  # third-party, optional extra
            raise UserError("sm120kit validate needs httpx, which is not installed",
                            hint=INSTALL_HINT) from exc
        self._httpx = httpx
        self.url = normalize_url(url)
        self.label = label
        self.timeout = timeout
        self.model = model
        self.api_key = api_key or None
        self.connect_timeout = connect_timeout
        self.short_timeout = min(short_timeout, timeout)
        self.requests = 0  # requests sent (the cost said up front is checked against it)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=httpx.Timeout(timeout, connect=connect_timeout))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport -----------------------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{self.label} {self.url}{path}"

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                optional: bool = False) -> Any:
        """JSON answer of ``method path``; ``optional``: None on 404 instead of an error."""
        hx = self._httpx
        self.requests += 1
        quick = path in QUICK_PATHS
        limit = self.short_timeout if quick else self.timeout
        try:
            resp = self._http.request(method, path, json=body,
                                      timeout=hx.Timeout(limit, connect=self.connect_timeout))
        except hx.ConnectTimeout as exc:
            raise UserError(
                f"{self._where(path)}: no connection within {self.connect_timeout:g} s",
                hint="is the host reachable (address, firewall, VPN)? --timeout does not change "
                     "this: it is the read timeout of a connected request",
            ) from exc
        except hx.TimeoutException as exc:
            if quick:
                raise UserError(
                    f"{self._where(path)}: silent server: it accepts the connection but sent no "
                    f"answer within {limit:g} s (a ready vLLM answers {path} at once)",
                    hint="is the process stopped or hung, still starting, or not an HTTP server? "
                         "--timeout only bounds generation requests",
                ) from exc
            raise UserError(
                f"{self._where(path)}: no answer within {self.timeout:g} s ({type(exc).__name__})",
                hint="a long prompt on a cold server can take minutes: raise --timeout",
            ) from exc
        except hx.ConnectError as exc:
            raise UserError(f"{self._where(path)}: cannot connect ({_short(str(exc), 60)})",
                            hint="is the server up and listening on that host:port?") from exc
        except hx.HTTPError as exc:
            raise UserError(f"{self._where(path)}: {type(exc).__name__}: {_short(str(exc))}") from exc
        if optional and resp.status_code == 404:
            return None
        if resp.status_code == 401:
            raise UserError(self.unauthorized(path), hint=KEY_HINT)
        if resp.status_code >= 400:
            raise UserError(f"{self._where(path)}: HTTP {resp.status_code}: "
                            f"{error_text(resp.text)}")
        if path == "/metrics":
            return resp.text
        try:
            return resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            ctype = resp.headers.get("content-type", "no content-type")
            raise UserError(
                f"{self._where(path)}: answer is not JSON ({ctype}): {_short(resp.text, 60)!r}",
                hint="is this URL an OpenAI-compatible server (vLLM `vllm serve`)?",
            ) from exc

    def unauthorized(self, path: str) -> str:
        """The one line for a 401: which server, and the option that fixes it."""
        if self.api_key:
            return (f"{self._where(path)}: HTTP 401 Unauthorized: the server rejects the API key "
                    "given (--api-key / VLLM_API_KEY / OPENAI_API_KEY)")
        return (f"{self._where(path)}: HTTP 401 Unauthorized: the server requires an API key; "
                "pass it with --api-key (or set VLLM_API_KEY)")

    # --- endpoints -----------------------------------------------------------------------------

    def models(self) -> tuple[str, int | None]:
        """Served model id (``--model`` if given, else the first) and its ``max_model_len``."""
        data = self.request("GET", "/v1/models")
        self.model, mml = parse_models(data, self._where("/v1/models"), self.model,
                                       f"{self.label} {self.url}")
        return self.model, mml

    def token_ids(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of ``text`` as a completion prompt; ``special``: with the tokens such as
        BOS that the tokenizer adds to a whole prompt."""
        path = "/tokenize"
        data = self.request("POST", path, {"model": self.model, "prompt": text,
                                           "add_special_tokens": special}, optional=True)
        if data is None:
            raise UserError(f"{self._where(path)}: no tokenizer endpoint (404)",
                            hint="validate counts tokens with vLLM's /tokenize; point it at vLLM")
        ids = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(ids, list) or len(ids) != parse_count(data, self._where(path)):
            raise UserError(f"{self._where(path)}: answer has no token ids")
        return [int(i) for i in ids]

    def complete(self, prompt: str | list[int], *, max_tokens: int,
                 top_logprobs: int) -> Completion:
        return self.complete_batch([prompt], max_tokens=max_tokens, top_logprobs=top_logprobs)[0]

    def complete_batch(self, prompts: list[str] | list[list[int]] | list[str | list[int]], *,
                       max_tokens: int, top_logprobs: int) -> list[Completion]:
        """Greedy completions of several prompts (texts or token ids) in one request (the
        server batches them); token ids go to the model as they are (no BOS added)."""
        path = "/v1/completions"
        body = {"model": self.model, "prompt": prompts[0] if len(prompts) == 1 else prompts,
                "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0, "seed": 0,
                "logprobs": top_logprobs, "return_tokens_as_token_ids": True}
        data = self.request("POST", path, body)
        where = self._where(path)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise UserError(f"{where}: {len(prompts)} prompts, "
                            f"{len(choices) if isinstance(choices, list) else 'no'} choices")
        order = sorted(range(len(choices)), key=lambda i: _index(choices[i], i))
        return [parse_completion({"choices": [choices[i]]}, where) for i in order]

    def score(self, ids: list[int], *, top_logprobs: int) -> Completion:
        """Teacher forcing: the logprob of every token of ``ids`` given the ones before it (vLLM's
        ``echo`` with prompt logprobs), token ids as ``token_id:N``; one generated token."""
        path = "/v1/completions"
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0,
                "top_p": 1.0, "seed": 0, "echo": True, "logprobs": top_logprobs,
                "return_tokens_as_token_ids": True}
        return parse_completion(self.request("POST", path, body), self._where(path))

    def metrics(self) -> str | None:
        try:
            text = self.request("GET", "/metrics", optional=True)
        except UserError:
            return None
        return text if isinstance(text, str) else None


def parse_models(data: Any, where: str, model: str | None, who: str) -> tuple[str, int | None]:
    """vLLM's ModelList: the id of ``model`` (or of the first card) and its ``max_model_len``."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise UserError(f"{where}: no model listed in the answer")
    pick = items[0]
    if model is not None:
        named = [m for m in items if isinstance(m, dict) and m.get("id") == model]
        if not named:
            ids = ", ".join(str(m.get("id")) for m in items if isinstance(m, dict))
            raise UserError(f"{who} serves no model {model!r} (it serves: {ids})",
                            hint="pass one of them with --model")
        pick = named[0]
    if not isinstance(pick, dict) or not pick.get("id"):
        raise UserError(f"{where}: model entry without an id")
    mml = pick.get("max_model_len")
    return str(pick["id"]), int(mml) if isinstance(mml, int | float) else None


def parse_count(data: Any, where: str) -> int:
    """vLLM's TokenizeResponse: the token count."""
    count = data.get("count") if isinstance(data, dict) else None
    if count is None and isinstance(data, dict) and isinstance(data.get("tokens"), list):
        count = len(data["tokens"])
    if not isinstance(count, int):
        raise UserError(f"{where}: answer has no token count")
    return count


def error_text(body: str) -> str:
    """vLLM's error body in full: ``{"error": {"message", "type", "param", "code"}}`` (also the
    flat ``{"message", "type", ...}`` of older servers and the middleware's ``{"error": "..."}``);
    any other body, shortened."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _short(body)
    err = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(err, str):
        return " ".join(err.split())
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return _short(body)
    tags = [f"{k} {err[k]}" for k in ("type", "param") if err.get(k) not in (None, "")]
    msg = " ".join(err["message"].split())
    return f"{msg} ({', '.join(tags)})" if tags else msg


def _index(choice: Any, default: int) -> int:
    i = choice.get("index") if isinstance(choice, dict) else None
    return i if isinstance(i, int) else default


def parse_completion(data: Any, where: str) -> Completion:
    """The first choice of an OpenAI completions answer; its logprobs must be there."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UserError(f"{where}: answer has no choices")
    ch = choices[0]
    lp = ch.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
        raise UserError(f"{where}: answer carries no logprobs",
                        hint="vLLM always returns the logprobs it is asked for (or answers 400): "
                             "is this URL a vLLM OpenAI server, not a proxy that strips them?")
    tokens = [str(t) for t in lp.get("tokens") or []]
    values = [float("nan") if v is None else float(v) for v in lp["token_logprobs"]]
    top_raw = lp.get("top_logprobs") or []
    top = [{str(k): float(v) for k, v in (d or {}).items() if v is not None} for d in top_raw]
    if len(tokens) != len(values) or (top and len(top) != len(tokens)):
        raise UserError(f"{where}: logprobs lists of different lengths")
    return Completion(text=str(ch.get("text") or ""), tokens=tokens, logprobs=values, top=top,
                      finish_reason=ch.get("finish_reason"))
