"""Redaction of secrets (and optional host/IP obfuscation) for everything written to a bundle.

Three layers, applied to every text written into a bundle:

1. **Known values.** Values of secret-named environment variables and of secret flags in argv
   (``--api-key X``, ``--hf-token=X``) are remembered and every literal occurrence is replaced,
   whatever the surrounding format (a log line echoing ``non-default args: {'api_key': ...}``).
2. **Patterns.** Hugging Face tokens (``hf_...``), ``sk-...`` API keys, ``Bearer ...`` headers,
   ``NAME=value`` where NAME holds TOKEN/KEY/SECRET/PASSWORD/CREDENTIAL, ``'api_key': '...'``
   dict reprs, ``--api-key VALUE``, URL credentials (``scheme://user:pass@``) and secret query
   parameters (``?token=...``).
3. **Hosts (opt-in).** With a map file, host names and IPv4 addresses are replaced by stable
   aliases (``host-1``, ``10.255.0.1``-style ``ip-1``); the map (original → alias) is kept in the
   private map file, never in the bundle, so the same machine gets the same alias across bundles.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

REDACTED = "<redacted>"

_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# Names that contain a secret word but are not secrets (kept so the bundle stays useful).
_BENIGN_ENV = re.compile(r"TOKENIZERS?_|_TOKENS$|^KEYTAB$|_KEY_?(?:PATH|FILE)$|KEYFILE")


def is_secret_env_name(name: str) -> bool:
    """True for env var names holding TOKEN/KEY/SECRET/PASSWORD/CREDENTIAL (a few benign
    ``*_TOKENS`` / ``TOKENIZERS_*`` / key *file path* names excepted)."""
    up = name.upper()
    if not any(w in up for w in _SECRET_WORDS):
        return False
    return not _BENIGN_ENV.search(up)


# A flag is secret when its name *ends* in one of these words: --api-key, --hf-token, --token,
# --db-password; not --max-num-batched-tokens, --tokenizer or --ssl-keyfile.
_SECRET_FLAG = re.compile(
    r"^--?(?:[\w-]*[-_])?(?:api[-_]?key|key|token|secret|password|passwd|credentials?|auth)$",
    re.IGNORECASE,
)


def is_secret_flag(flag: str) -> bool:
    return bool(_SECRET_FLAG.match(flag))


_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # URL credentials: scheme://user:pass@host
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@'\"]+:[^/\s@'\"]+@"), r"\1" + REDACTED + "@"),
    # secret query parameters
    (
        re.compile(
            r"([?&](?:access_token|token|api[_-]?key|apikey|key|sig|signature|password|secret)=)"
            r"[^&\s'\"]+",
            re.IGNORECASE,
        ),
        r"\1" + REDACTED,
    ),
    # Authorization headers
    (re.compile(r"(\b[Bb]earer\s+)[A-Za-z0-9._~+/=-]{6,}"), r"\1" + REDACTED),
    (re.compile(r"(\b[Bb]asic\s+)[A-Za-z0-9+/=]{8,}"), r"\1" + REDACTED),
    # Hugging Face and OpenAI/Anthropic-style keys
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), "hf_" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "sk-" + REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{12,}"), "gh_" + REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "AKIA" + REDACTED),
    # --api-key VALUE / --api-key=VALUE (and other secret flags)
    (
        re.compile(
            r"((?<![\w-])--?(?:[\w-]*[-_])?(?:api[-_]?key|token|secret|password|passwd|credentials?)"
            r"(?:=|\s+))(?!<redacted>)(\"[^\"]*\"|'[^']*'|\S+)",
            re.IGNORECASE,
        ),
        r"\1" + REDACTED,
    ),
    # NAME=value / NAME: value for secret-looking names (env dumps, shell traces)
    (
        re.compile(
            r"(\b[A-Za-z0-9_]*(?:TOKEN(?!S|IZER)|_KEY(?!_?(?:PATH|FILE))|APIKEY|SECRET|PASSWORD"
            r"|PASSWD|CREDENTIALS?)[A-Za-z0-9_]*\s*[=:]\s*)(?!<redacted>)(\"[^\"]*\"|'[^']*'|[^\s,;'\"}\]]+)",
        ),
        r"\1" + REDACTED,
    ),
    # dict / JSON reprs: 'api_key': 'x', "token": ["x"]
    (
        re.compile(
            r"""((['"])[\w-]*(?:api_?key|token|secret|password|passwd|credentials?)\2\s*:\s*"""
            r"""\[?\s*)(['"])(?!<redacted>)[^'"]*\3""",
            re.IGNORECASE,
        ),
        r"\1\3" + REDACTED + r"\3",
    ),
)

_IPV4 = re.compile(r"(?<![\d.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?![\d.])")
_KEEP_IPS = {"127.0.0.1", "0.0.0.0", "255.255.255.255"}


class Redactor:
    """Applies the three layers above. ``enabled=False`` (``--no-redact``) passes text through,
    but host obfuscation still applies when a map file was given."""

    def __init__(self, enabled: bool = True, host_map_file: Path | None = None) -> None:
        self.enabled = enabled
        self._values: set[str] = set()
        self._values_rx: re.Pattern[str] | None = None
        self.host_map_file = host_map_file
        self.host_map: dict[str, str] = {}
        self._host_rx: re.Pattern[str] | None = None
        if host_map_file is not None:
            self._load_host_map(host_map_file)
            for h in _local_host_names():
                self.add_host(h)

    # --- known secret values ---------------------------------------------------------------
    def add_secret(self, value: str | None) -> None:
        """Remember a literal secret value (ignored when shorter than 4 characters)."""
        if not value:
            return
        value = value.strip().strip("'\"")
        if len(value) < 4 or value == REDACTED:
            return
        self._values.add(value)
        self._values_rx = None

    def learn_env(self, env: Mapping[str, str]) -> None:
        for k, v in env.items():
            if is_secret_env_name(k):
                self.add_secret(v)

    def learn_argv(self, argv: Iterable[str]) -> None:
        args = list(argv)
        for i, a in enumerate(args):
            if a.startswith("-") and "=" in a:
                flag, _, val = a.partition("=")
                if is_secret_flag(flag):
                    self.add_secret(val)
            elif is_secret_flag(a) and i + 1 < len(args):
                self.add_secret(args[i + 1])

    # --- host obfuscation --------------------------------------------------------------------
    def _load_host_map(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                self.host_map = {str(k): str(v) for k, v in data.items()}
        except FileNotFoundError:
            self.host_map = {}
        except (OSError, ValueError):
            self.host_map = {}

    def add_host(self, name: str | None) -> str | None:
        """Register a host name or IP for obfuscation; returns its alias (None when off)."""
        if self.host_map_file is None or not name or name in _KEEP_IPS or name == "localhost":
            return None
        if name not in self.host_map:
            kind = "ip" if _IPV4.fullmatch(name) else "host"
            n = 1 + sum(1 for v in self.host_map.values() if v.startswith(kind + "-"))
            self.host_map[name] = f"{kind}-{n}"
            self._host_rx = None
        return self.host_map[name]

    def host_alias(self, name: str) -> str:
        alias = self.add_host(name)
        return alias if alias else name

    def save_host_map(self) -> None:
        """Write the private map (original → alias) back, readable only by the owner."""
        if self.host_map_file is None:
            return
        self.host_map_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.host_map_file.with_suffix(self.host_map_file.suffix + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.host_map, f, indent=1, sort_keys=True)
        os.replace(tmp, self.host_map_file)

    # --- applying ----------------------------------------------------------------------------
    def text(self, s: str) -> str:
        """Redact one string (any size)."""
        if self.enabled and s:
            if self._values:
                if self._values_rx is None:
                    vals = sorted(self._values, key=len, reverse=True)
                    self._values_rx = re.compile("|".join(re.escape(v) for v in vals))
                s = self._values_rx.sub(REDACTED, s)
            for rx, repl in _PATTERNS:
                s = rx.sub(repl, s)
        if self.host_map_file is not None and s:
            for ip in set(_IPV4.findall(s)):
                self.add_host(ip)
            if self.host_map:
                if self._host_rx is None:
                    names = sorted(self.host_map, key=len, reverse=True)
                    self._host_rx = re.compile(
                        r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w-])"
                    )
                s = self._host_rx.sub(lambda m: self.host_map[m.group(0)], s)
        return s

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """An environment with secret-named variables' values replaced, the rest text-redacted."""
        out: dict[str, str] = {}
        for k, v in sorted(env.items()):
            if self.enabled and is_secret_env_name(k):
                out[k] = REDACTED
            else:
                out[k] = self.text(v)
        return out

    def argv(self, argv: Iterable[str]) -> list[str]:
        """argv with secret flag values replaced (``--api-key X`` → ``--api-key <redacted>``)."""
        args = list(argv)
        if not self.enabled:
            return [self.text(a) for a in args]
        out: list[str] = []
        skip = False
        for a in args:
            if skip:
                out.append(REDACTED)
                skip = False
                continue
            if a.startswith("-") and "=" in a and is_secret_flag(a.split("=", 1)[0]):
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
                continue
            if is_secret_flag(a):
                skip = True
            out.append(self.text(a))
        return out


def _local_host_names() -> list[str]:
    names: list[str] = []
    try:
        names.append(socket.gethostname())
        fq = socket.getfqdn()
        if fq and fq not in names:
            names.append(fq)
    except OSError:
        pass
    return [n for n in names if n and n != "localhost"]
