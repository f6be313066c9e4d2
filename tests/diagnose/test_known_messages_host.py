"""What the host, the OS, Python's process model and the model download say (catalogue file
known-host.toml): CPython's multiprocessing, the errno texts Python's OSError prints, the
Hugging Face Hub client (huggingface_hub, requests, urllib3), ModelScope's client, asyncio's
bind of the API server, SGLang's port checks and the shell's report of a SIGILL. Each log is the
message in the shape its software prints it (wording from the source named in the comment),
inside the lines a vLLM / SGLang start prints around it; the top finding names the category an
engineer who knows that software names, and it rests on an entry of known-host.toml (without
those entries these logs were `rank-crashed`, `unknown` or, for a full download disk,
`shared-memory`). vLLM's spawn warnings, a download that retried and resumed, ModelScope's
logged 404 in a run that goes on, and huggingface_hub's disk-space warning on a start that
completes stay exit 0; a full /dev/shm stays shared memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-host.toml"

_VLLM = (
    "INFO 03-10 11:02:00 api_server.py:712] vLLM API server version 0.8.5\n"
    "INFO 03-10 11:02:02 llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=2\n"
)
_V1 = (
    "INFO 07-07 07:35:34 [__init__.py:244] Automatically detected platform cuda.\n"
    "INFO 07-07 07:35:37 [api_server.py:1287] vLLM API server version 0.9.1\n"
    "INFO 07-07 07:35:37 [cli_args.py:309] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct'}\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", line 470, in cached_files\n'
    "    hf_hub_download(\n"
    '  File "/usr/local/lib/python3.12/dist-packages/huggingface_hub/file_download.py", line 1008, in hf_hub_download\n'
)
_READY = (
    "INFO 03-10 11:04:30 model_runner.py:1110] Loading model weights took 14.99 GB\n"
    "INFO 03-10 11:05:00 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # CPython v3.12.0 Lib/multiprocessing/spawn.py (_check_not_importing_main); https://github.com/vllm-project/vllm/issues/5637
    'spawn-no-main-guard': ('config-invalid', _VLLM + (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        '  File "/usr/lib/python3.10/multiprocessing/spawn.py", line 116, in spawn_main\n'
        "    exitcode = _main(fd, parent_sentinel)\n"
        '  File "/usr/lib/python3.10/multiprocessing/spawn.py", line 236, in prepare\n'
        "    _fixup_main_from_path(data['init_main_from_path'])\n"
        "RuntimeError: \n"
        "        An attempt has been made to start a new process before the\n"
        "        current process has finished its bootstrapping phase.\n"
        "\n"
        "        This probably means that you are not using fork to start your\n"
        "        child processes and you have forgotten to use the proper idiom\n"
        "        in the main module:\n")),
    # CPython v3.12.0 Lib/multiprocessing/process.py (BaseProcess.start); https://github.com/vllm-project/vllm/issues/18308
    'daemonic-children': ('config-invalid', _VLLM + (
        '(VllmWorkerProcess pid=3872902)   File "/usr/lib/python3.12/multiprocessing/process.py", line 118, in start\n'
        "(VllmWorkerProcess pid=3872902)     assert not _current_process._config.get('daemon'), \\\n"
        "(VllmWorkerProcess pid=3872902) AssertionError: daemonic processes are not allowed to have children\n")),
    # CPython v3.12.0 Lib/multiprocessing/context.py (set_start_method)
    'start-method-twice': ('config-invalid', (
        "Traceback (most recent call last):\n"
        '  File "/home/u/run.py", line 4, in <module>\n'
        "    multiprocessing.set_start_method('spawn')\n"
        '  File "/usr/lib/python3.10/multiprocessing/context.py", line 247, in set_start_method\n'
        "    raise RuntimeError('context has already been set')\n"
        "RuntimeError: context has already been set\n")),
    # CPython v3.12.0 Lib/multiprocessing/reduction.py (recvfds); https://github.com/pytorch/pytorch/issues/973
    'fd-passing': ('config-invalid', _VLLM + (
        '  File "/usr/lib/python3.10/multiprocessing/reduction.py", line 164, in recvfds\n'
        "    raise RuntimeError('received %d items of ancdata' %\n"
        "RuntimeError: received 0 items of ancdata\n")),
    # CPython Objects/exceptions.c with EMFILE; https://github.com/facebookresearch/fairseq/issues/87
    'emfile': ('config-invalid', _VLLM + (
        "ERROR 03-10 11:20:00 serving_chat.py:200] Error in preprocessing prompt inputs\n"
        "OSError: [Errno 24] Too many open files: '/tmp/pymp-tgep00l9'\n")),
    # torch v2.5.1 torch/lib/libshm/core.cpp (shared-memory tensors between processes)
    'emfile-torch-shm': ('config-invalid', _VLLM + (
        "RuntimeError: unable to open shared memory object </torch_2417_3482937481_0> in read-write mode: Too many open files (24)\n")),
    # CPython Objects/exceptions.c with EACCES; https://github.com/tenstorrent/tt-inference-server/issues/37
    'hf-cache-not-writable': ('config-invalid', _V1 + (
        "    os.makedirs(os.path.dirname(blob_path), exist_ok=True)\n"
        '  File "/usr/lib/python3.8/os.py", line 223, in makedirs\n'
        "    mkdir(name, mode)\n"
        "PermissionError: [Errno 13] Permission denied: '/home/user/cache_root/huggingface'\n")),
    # same, Triton's cache manager; https://github.com/dphnAI/sonar/issues/458
    'triton-cache-not-writable': ('config-invalid', _VLLM + (
        '  File "/usr/local/lib/python3.10/dist-packages/triton/runtime/cache.py", line 66, in __init__\n'
        "    os.makedirs(self.cache_dir, exist_ok=True)\n"
        "PermissionError: [Errno 13] Permission denied: '/app/.triton'\n")),
    # CPython Objects/exceptions.c with EROFS; https://github.com/Center-for-AI-Innovation/LLMFlux/issues/124
    'flashinfer-cache-read-only': ('config-invalid', _VLLM + (
        "INFO 03-10 11:03:00 model_runner.py:1110] Starting to load model meta-llama/Llama-3.1-8B-Instruct...\n"
        "OSError: [Errno 30] Read-only file system: '/projects/bfmz/minum/llmflux-data/.cache/flashinfer'\n")),
    # huggingface_hub v0.36.0 file_download.py writes to `<blob>.incomplete`; ENOSPC on that disk
    'download-disk-full': ('config-invalid', _V1 + (
        "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/blobs/5a2b0f.incomplete'\n")),
    # hf_xet's Rust io::Error wording
    'xet-disk-full': ('config-invalid', _V1 + (
        "RuntimeError: Data processing error: CAS service error : IO Error: No space left on device (os error 28)\n")),
    # huggingface_hub v0.36.0 file_download.py (_check_disk_space warning) beside a bare ENOSPC
    'download-disk-warned': ('config-invalid', _V1 + (
        "/usr/local/lib/python3.12/dist-packages/huggingface_hub/file_download.py:799: UserWarning: Not enough free disk space to download the file. The expected file size is: 4976.70 MB. The target location /root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/blobs only has 4100.31 MB free disk space.\n"
        "  warnings.warn(\n"
        "OSError: [Errno 28] No space left on device\n")),
    # huggingface_hub v0.36.0 utils/_http.py (hf_raise_for_status); https://github.com/boson-ai/higgs-audio/issues/123
    'hub-repo-not-found': ('config-invalid', _V1 + (
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-68a1df1f-3274fba05f177c4f00891218;d37ebc83)\n"
        "\n"
        "Repository Not Found for url: https://huggingface.co/api/models/xcodec_tps25_0215/revision/main.\n"
        "Please make sure you specified the correct `repo_id` and `repo_type`.\n"
        "If you are trying to access a private or gated repo, make sure you are authenticated.\n"
        "Invalid username or password.\n")),
    # same function, RevisionNotFound
    'hub-revision-not-found': ('config-invalid', _V1 + (
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: Root=1-66b1)\n"
        "\n"
        "Revision Not Found for url: https://huggingface.co/api/models/Qwen/Qwen2.5-7B/revision/v2.\n")),
    # same function, EntryNotFound
    'hub-entry-not-found': ('checkpoint-config', _V1 + (
        "huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: Root=1-66b1)\n"
        "\n"
        "Entry Not Found for url: https://huggingface.co/org/model/resolve/main/model.safetensors.index.json.\n")),
    # same function, 403 with the Hub's message
    'hub-token-forbidden': ('config-invalid', _V1 + (
        "huggingface_hub.errors.HfHubHTTPError: (Request ID: Root=1-66b1)\n"
        "\n"
        "403 Forbidden: Please enable access to public gated repositories in your fine-grained token settings to view this repository..\n"
        "Cannot access content at: https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json.\n"
        "Make sure your token has the correct permissions.\n")),
    # requests v2.32.3 models.py (raise_for_status); https://github.com/opea-project/GenAIExamples/issues/2237
    'hub-401-unauthorized': ('config-invalid', _V1 + (
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/meta-llama/Meta-Llama-3-8B-Instruct/resolve/main/config.json\n")),
    # same wording, 429
    'hub-429': ('config-invalid', _V1 + (
        "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/api/models/Qwen/Qwen2.5-7B-Instruct/tree/main?recursive=True&expand=False\n")),
    # huggingface_hub v0.36.0 file_download.py (offline, not cached)
    'hub-offline-miss': ('config-invalid', _V1 + (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' to False.\n")),
    # same file, online
    'hub-locate-failed': ('config-invalid', _V1 + (
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache. Please check your connection and try again or make sure your Internet connection is on.\n")),
    # CPython Modules/_ssl.c verify error via urllib3/requests; https://github.com/vllm-project/vllm/issues/12673
    'hub-tls-verify': ('config-invalid', _V1 + (
        "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /meta-llama/Llama-3.2-1B-Instruct/resolve/main/config.json (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1007)')))\n")),
    # urllib3 2.2.3 connection.py ("Unable to connect to proxy")
    'hub-proxy': ('config-invalid', _V1 + (
        "requests.exceptions.ProxyError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /api/models/Qwen/Qwen2.5-7B (Caused by ProxyError('Unable to connect to proxy', OSError('Tunnel connection failed: 407 Proxy Authentication Required')))\"), '(Request ID: 1)')\n")),
    # urllib3 2.2.3 exceptions.py (NameResolutionError)
    'hub-dns': ('config-invalid', _V1 + (
        "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /api/models/Qwen/Qwen2.5-7B (Caused by NameResolutionError(\\\"<urllib3.connection.HTTPSConnection object at 0x7f2b>: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\\\"))\"), '(Request ID: 2)')\n")),
    # urllib3 2.2.3 exceptions.py (MaxRetryError) raised after huggingface_hub's retries
    'hub-unreachable': ('config-invalid', _V1 + (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /Qwen/Qwen2.5-7B-Instruct/resolve/main/config.json (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f3c>: Failed to establish a new connection: [Errno 101] Network is unreachable'))\n")),
    # huggingface_hub v0.36.0 file_download.py (http_get)
    'hf-transfer-missing': ('config-invalid', _V1 + (
        "ValueError: Fast download using 'hf_transfer' is enabled (HF_HUB_ENABLE_HF_TRANSFER=1) but 'hf_transfer' package is not available in your environment. Try `pip install hf_transfer`.\n")),
    # same file (consistency check after the download)
    'download-size-mismatch': ('checkpoint-config', _V1 + (
        "OSError: Consistency check failed: file should be of size 4976698672 but has size 3221225472 ((…)l-00001-of-00004.safetensors).\n"
        "This is usually due to network issues while downloading the file. Please retry with `force_download=True`.\n")),
    # SGLang v0.5.23 srt/utils/network.py (wait_port_available); https://github.com/gpustack/gpustack/issues/5842
    'sglang-port': ('config-invalid', (
        "[2025-07-12 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', port=30000, metrics_port=40290)\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/utils/network.py", line 102, in wait_port_available\n'
        "ValueError: metrics_port at 40290 is not available in 30 seconds. metrics_port is used by a process already. process.name()='sglang' process.cmdline()=['python3']\n")),
    # CPython v3.12.0 Lib/asyncio/base_events.py (create_server) under uvicorn; https://github.com/haotian-liu/LLaVA/issues/38
    'server-bind-address': ('config-invalid', _VLLM + (
        "INFO 03-10 11:05:00 api_server.py:937] Starting vLLM API server on http://::1:8000\n"
        "INFO:     Started server process [20125]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
        "ERROR:    [Errno 99] error while attempting to bind on address ('::1', 8000, 0, 0): cannot assign requested address\n"
        "INFO:     Waiting for application shutdown.\n"
        "INFO:     Application shutdown complete.\n")),
    # ModelScope v1.20.1 modelscope/hub/errors.py (handle_http_response), VLLM_USE_MODELSCOPE=True
    'modelscope-model-missing': ('config-invalid', _VLLM + (
        "2025-04-12 10:00:00,001 - modelscope - ERROR - The request model: google/gemma-2-9b does not exist!\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/site-packages/modelscope/hub/errors.py", line 120, in handle_http_response\n'
        "    raise HTTPError(http_error_msg, response=response)\n"
        "requests.exceptions.HTTPError: The request model: google/gemma-2-9b does not exist!\n")),
    # ModelScope v1.20.1 modelscope/hub/api.py; https://github.com/vllm-project/vllm-ascend/issues/829
    'modelscope-revision': ('config-invalid', _VLLM + (
        "modelscope.hub.errors.NotExistError: The model: Qwen/Qwen2.5-VL-7B-Instruct has no revision: main !\n")),
    # bash's report of SIGILL; https://github.com/intel/ipex-llm/issues/12922
    'sigill': ('library-version', (
        "INFO 03-03 10:00:01 [__init__.py:239] Automatically detected platform cpu.\n"
        "start-vllm-service.sh: line 18:  1669 Illegal instruction     (core dumped) python -m vllm.entrypoints.openai.api_server --port 8001 --model /llm/models/DeepSeek-R1-Distill-Qwen-7B\n")),
}

HEALTHY: dict[str, str] = {
    # vLLM utils (_maybe_force_spawn) and multiproc_worker_utils: it switches to spawn and goes on
    'vllm-spawn-warnings': _VLLM + (
        "WARNING 03-10 11:02:03 multiproc_worker_utils.py:281] CUDA was previously initialized. We must use the `spawn` multiprocessing start method. Setting VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. See https://docs.vllm.ai/en/latest/getting_started/troubleshooting.html#python-multiprocessing for more information.\n"
        "WARNING 03-10 11:02:04 utils.py:2900] We must use the `spawn` multiprocessing start method. Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. See https://docs.vllm.ai/en/latest/usage/troubleshooting.html#python-multiprocessing for more information. Reason: CUDA is initialized\n"
    ) + _READY,
    # huggingface_hub utils/_http.py (http_backoff) and file_download.py (http_get resume): the
    # download retries once, resumes and completes
    'hub-download-retried': _VLLM + (
        "INFO 03-10 11:02:05 weight_utils.py:254] Using model weights format ['*.safetensors']\n"
        "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /meta-llama/Llama-3.1-8B-Instruct/resolve/main/model-00002-of-00004.safetensors (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f3c>: Failed to establish a new connection: [Errno 101] Network is unreachable'))\"), '(Request ID: 5b1e)')' thrown while requesting GET https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/model-00002-of-00004.safetensors\n"
        "Retrying in 1s [Retry 1/5].\n"
        "Error while downloading from https://cdn-lfs-us-1.hf.co/repos/ab/cd/model-00002-of-00004.safetensors: HTTPSConnectionPool(host='cdn-lfs-us-1.hf.co', port=443): Read timed out.\n"
        "Trying to resume download...\n"
        "INFO 03-10 11:04:00 weight_utils.py:270] Time spent downloading weights for meta-llama/Llama-3.1-8B-Instruct: 95.1 seconds\n"
    ) + _READY,
    # ModelScope's client logs a 404 at ERROR and the caller (ms-swift) goes on: not the raised
    # HTTPError; https://github.com/QwenLM/Qwen3-VL/issues/841
    'modelscope-logged-404': (
        "[INFO:swift] model_parameter_info: Qwen2_5_VLForConditionalGeneration: 8292.1667M Params (589.5718M Trainable [7.1100%]), 0.0019M Buffers.\n"
        "[ERROR:modelscope] The request model: unknown does not exist!\n"
        "[INFO:swift] The training of Epoch 1 starts...\n"),
    # huggingface_hub file_download.py (_check_disk_space): a warning; the download fits after all
    'hub-disk-space-warning': _VLLM + (
        "/usr/local/lib/python3.10/dist-packages/huggingface_hub/file_download.py:653: UserWarning: Not enough free disk space to download the file. The expected file size is: 4976.70 MB. The target location /root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/blobs only has 4100.31 MB free disk space.\n"
        "  warnings.warn(\n"
    ) + _READY,
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_host_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_host_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device: '/dev/shm/psm_1234'",
    "OSError: [Errno 28] No space left on device",
])
def test_full_shared_memory_stays_shared_memory(line: str, tmp_path: Path) -> None:
    """A full /dev/shm (named, or no path at all) is still shared memory: known-host.toml's
    disk-full takes only a path outside /dev/shm."""
    log = tmp_path / "shm.log"
    log.write_text(_VLLM + line + "\n")
    res = diagnose([log])
    assert res.findings and res.findings[0].category == "shared-memory", res.verdict
