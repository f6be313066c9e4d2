"""Redaction: secrets planted in env, argv and the child's log output never reach the bundle
(searched in the bytes of every file of the unpacked tarball); hosts/IPs obfuscated on request."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from sm120kit.evidence.redact import REDACTED, Redactor, is_secret_env_name, is_secret_flag

from .helpers import only_bundle, read_tarball, run_collect

SECRETS = {
    "HF_TOKEN": "hf_PlantedTokenAbCdEfGhIjKlMn0123",
    "OPENAI_API_KEY": "sk-plantedOpenAiKey9876543210zz",
    "MY_SERVICE_PASSWORD": "Pl4nted-Passw0rd-xyz",
    "AWS_SECRET_ACCESS_KEY": "PlantedAwsSecretValue/abc+123",
    "DB_CREDENTIALS": "plantedcredentialvalue77",
    "AUTH_HEADER_TOKEN": "eyJplantedBearerToken.abc.def",
}
ARGV_KEY = "sk-argvPlantedApiKey55555555"
ARGV_TOKEN = "hf_ArgvPlantedToken00000000000"
URL_PASS = "urlPlantedPass99"
BEARER = "x"
URL = f"https://alice:{URL_PASS}@example.internal/models"
HF_ONLY_IN_LOG = "hf_OnlyInTheLogLine1234567890"

CHILD = r'''
import os, sys, time
print("env echo", os.environ["HF_TOKEN"], os.environ["MY_SERVICE_PASSWORD"])
print("non-default args: {'model': 'm', 'api_key': ['%s'], 'hf_token': '%s'}" % (sys.argv[2], sys.argv[4]))
print("Authorization: Bearer %s" % os.environ["AUTH_HEADER_TOKEN"])
print("pulling %s" % sys.argv[6])
print("token in text %s and AWS_SECRET_ACCESS_KEY=%s" % (sys.argv[7], os.environ["AWS_SECRET_ACCESS_KEY"]))
print("host %s at 10.23.45.67" % sys.argv[8], file=sys.stderr)
sys.stdout.flush()
while True:
    time.sleep(0.2)
'''


@pytest.mark.slow  # a real child run through a long quiet phase: 12-16 s on 2 busy cores
def test_no_secret_reaches_the_bundle(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    host = socket.gethostname()
    env = dict(os.environ, **SECRETS)
    out = tmp_path / "out"
    hostmap = tmp_path / "private" / "hosts.json"
    r = run_collect(
        ["-o", str(out), "--stall-timeout", "3", "--deadline", "20", "--json", "--no-doctor",
         "--obfuscate-hosts", str(hostmap), "--",
         sys.executable, str(script), "--api-key", ARGV_KEY, f"--hf-token={ARGV_TOKEN}",
         ARGV_TOKEN, BEARER, URL, HF_ONLY_IN_LOG, host],
        env=env,
    )
    assert r.returncode == 1, r.stderr[-2000:]
    tb = only_bundle(out)
    files = read_tarball(tb)
    planted = list(SECRETS.values()) + [ARGV_KEY, ARGV_TOKEN, URL_PASS, HF_ONLY_IN_LOG]
    for name, data in files.items():
        for s in planted:
            assert s.encode() not in data, f"{s!r} leaked into {name}"
    # the evidence is still there, redacted
    log = files["logs/child.log"].decode()
    assert "env echo" in log and REDACTED in log and "Authorization: Bearer " + REDACTED in log
    assert "https://" + REDACTED + "@example.internal/models" in log
    procs = json.loads(files["processes.json"])
    argv = next(p["cmdline"] for p in procs.values() if str(script) in " ".join(p["cmdline"]))
    assert argv[argv.index("--api-key") + 1] == REDACTED
    assert f"--hf-token={REDACTED}" in argv
    env_json = json.loads(files["env.json"])
    assert all(env_json["child_env"][k] == REDACTED for k in SECRETS)
    assert env_json["child_env"]["PATH"] == os.environ["PATH"]  # non-secrets are kept
    # hosts: the private map (outside the bundle) holds the originals; the bundle only aliases
    mp = json.loads(hostmap.read_text())
    assert mp[host].startswith("host-") and mp["10.23.45.67"].startswith("ip-")
    assert oct(hostmap.stat().st_mode & 0o777) == "0o600"
    assert host not in tb.name
    assert b"10.23.45.67" not in b"".join(files.values())
    assert mp["10.23.45.67"].encode() in files["logs/child.log"]
    # --no-redact keeps them (opt-out works)
    out2 = tmp_path / "out2"
    r = run_collect(["-o", str(out2), "--stall-timeout", "3", "--deadline", "20", "--no-redact",
                     "--no-doctor", "--stacks", "none", "--", sys.executable, str(script),
                     "--api-key", ARGV_KEY, "x", ARGV_TOKEN, BEARER, URL, HF_ONLY_IN_LOG,
                     host], env=env)
    files2 = read_tarball(only_bundle(out2))
    assert ARGV_KEY.encode() in files2["processes.json"]
    assert SECRETS["HF_TOKEN"].encode() in files2["logs/child.log"]


def test_redactor_rules() -> None:
    red = Redactor()
    assert is_secret_env_name("HF_TOKEN") and is_secret_env_name("HUGGING_FACE_HUB_TOKEN")
    assert is_secret_env_name("OPENAI_API_KEY") and is_secret_env_name("PGPASSWORD")
    assert not is_secret_env_name("TOKENIZERS_PARALLELISM")
    assert not is_secret_env_name("VLLM_MAX_TOKENS") and not is_secret_env_name("PATH")
    assert is_secret_flag("--api-key") and is_secret_flag("--hf-token") and is_secret_flag("--token")
    assert not is_secret_flag("--max-num-batched-tokens") and not is_secret_flag("--tokenizer")
    assert not is_secret_flag("--ssl-keyfile")
    t = red.text("--api-key abc123456 --tokenizer deepseek-ai/x --max-num-batched-tokens 8192")
    assert "abc123456" not in t and "deepseek-ai/x" in t and "8192" in t
    assert red.text("x=https://u:p4ss@h/") == f"x=https://{REDACTED}@h/"
    assert "q=1" in red.text("https://h/p?q=1&token=zzzzzz") and "zzzzzz" not in red.text(
        "https://h/p?q=1&token=zzzzzz")
    assert "sk-ant-api03-abcdefgh" not in red.text("key sk-ant-api03-abcdefghijkl")
    red.add_secret("literal-secret-value")
    assert red.text("echo literal-secret-value!") == f"echo {REDACTED}!"
    assert red.argv(["vllm", "serve", "--api-key", "K", "--port", "8000"]) == [
        "vllm", "serve", "--api-key", REDACTED, "--port", "8000"]
    off = Redactor(enabled=False)
    assert off.text("hf_abcdefghijklmnop") == "hf_abcdefghijklmnop"
