"""The engine's environment: an allowlist, never a copy of the node manager's.

An engine runs code motor does not control (a model loaded with `trust_remote_code`, plugins), so it gets only:

- from the node manager's environment, the variables engines read: the names and prefixes below (the process
  basics, Python, Hugging Face, vLLM, vllm-ascend and CANN, SGLang, Mooncake, CUDA/NCCL, OpenMP, the allocator
  and the math libraries, torch and Triton), and never one whose name says it holds a credential;
- everything its spec sets (`EngineSpec.env`: the env.json section of its role and what the topology adds,
  such as MOONCAKE_CONFIG_PATH or VLLM_HOST_IP): anything else an engine needs goes there;
- the credentials its spec names (`EngineSpec.secret_env`: env.json's HF_TOKEN and the like).

motor's own credentials (the controller token, instance credentials, API keys, etcd's) never pass, whatever
the spec says.
"""

from collections.abc import Mapping

from motor.protocol.credentials import is_credential_env, is_motor_credential

NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "HOSTNAME",
        "POD_IP",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HIP_VISIBLE_DEVICES",
        "MAX_JOBS",
        "CC",
        "CXX",
        "PROMETHEUS_MULTIPROC_DIR",
        "DO_NOT_TRACK",
        "NO_COLOR",
        "FORCE_COLOR",
    }
)
PREFIXES = (
    "LC_",
    "PYTHON",
    "XDG_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "MALLOC_",
    "VLLM_",
    "SGLANG_",
    "SGL_",
    "LMCACHE_",
    "ASCEND_",
    "ATB_",
    "HCCL_",
    "LCCL_",
    "ACL_",
    "MC_",
    "MOONCAKE_",
    "UCX_",
    "NIXL_",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "CUBLAS_",
    "CUDNN_",
    "ROCM_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "TRITON_",
    "GLOO_",
    "CCL_",
    "RAY_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "NUMEXPR_",
)


def allowed(name: str) -> bool:
    """Whether an engine may inherit `name` from the node manager's environment."""
    if is_credential_env(name):
        return False
    return name in NAMES or name.startswith(PREFIXES)


def engine_environment(
    ambient: Mapping[str, str], spec_env: Mapping[str, str], credentials: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of the engine: the allowlisted part of `ambient` (the node manager's), then its
    spec's variables, then the env.json credentials its spec names (`credentials`, resolved)."""
    env = {name: value for name, value in ambient.items() if allowed(name)}
    env.update(spec_env)
    env.update(credentials)
    return {name: value for name, value in env.items() if not is_motor_credential(name)}
