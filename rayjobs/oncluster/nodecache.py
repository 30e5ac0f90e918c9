"""A node's caches that its jobs share (issue 33): compiled kernels, compile caches and byte code.

Each variable of :data:`NODE_CACHES` the job's environment does not set points to a subdir of
``$RAYJOBS_NODE_CACHE`` on the node; the runner (:mod:`rayjobs.oncluster.runner`) puts them in
every attempt's environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

#: Node-local caches kept across jobs (issue 33): each variable the job's environment does not set
#: points to a subdir of ``$RAYJOBS_NODE_CACHE`` (default :data:`NODE_CACHE_DEFAULT`; the node
#: script creates it; ``off`` sets none). vLLM's, torch inductor's, Triton's, the CUDA driver's
#: (PTX JIT) and torch's C++ extension caches; their defaults (``~/.cache``, ``/tmp``) may be per
#: container or shared over NFS. Python byte code too (``PYTHONPYCACHEPREFIX``, :func:`pyc_cache`)
#: where the job may not write it (``PYTHONDONTWRITEBYTECODE``, set in many containers): else every
#: process of every job compiles vLLM, Ray and verl from source again.
NODE_CACHE_ENV = "RAYJOBS_NODE_CACHE"
NODE_CACHE_DEFAULT = f"/tmp/rayjobs-cache-{os.getuid()}"
NODE_CACHES = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
               "TRITON_CACHE_DIR": "triton", "CUDA_CACHE_PATH": "nv", "TORCH_EXTENSIONS_DIR": "torch_extensions"}
PYC_CACHE = ("PYTHONPYCACHEPREFIX", "pyc")
PYC_ENV = "RAYJOBS_NODE_CACHE_PYC"
NO_PYC = "PYTHONDONTWRITEBYTECODE"
ACTOR_ENV = "ray_kwargs.ray_init.runtime_env.env_vars"


def pyc_cache(env: dict[str, str], given: set[str]) -> bool:
    """Whether the job's byte code goes into the node cache: by default when ``env`` forbids
    writing it (``PYTHONDONTWRITEBYTECODE`` non-empty); ``RAYJOBS_NODE_CACHE_PYC=0`` never, ``=1``
    always (a prefix hides the ``__pycache__`` dirs pip wrote: on a stack installed with byte code
    a node's first job compiles it all); never when the job sets ``PYTHONPYCACHEPREFIX`` (or
    either variable for verl's actors)."""
    flag = env.get(PYC_ENV, "").strip().lower()
    if flag in ("0", "false", "no", "off") or env.get(PYC_CACHE[0]):
        return False
    if {f"{ACTOR_ENV}.{PYC_CACHE[0]}", f"{ACTOR_ENV}.{NO_PYC}"} & given:
        return False
    return flag in ("1", "true", "yes") or bool(env.get(NO_PYC))


def node_cache_env(env: dict[str, str], argv: Optional[list[str]] = None) -> dict[str, str]:
    """``{VAR: value}``: the node cache variables the job gets, each one ``env`` does not set and
    the command does not pass to verl's actors itself (``...runtime_env.env_vars.VAR=``); with
    byte code in the cache, ``PYTHONDONTWRITEBYTECODE`` is ``""`` (Python takes it as unset)."""
    root = env.get(NODE_CACHE_ENV, NODE_CACHE_DEFAULT).strip()
    if root.lower() in ("", "0", "off", "false", "none"):
        return {}
    given = {a.lstrip("+~").partition("=")[0] for a in argv or []}
    caches = dict(NODE_CACHES)
    if pyc_cache(env, given):
        caches[PYC_CACHE[0]] = PYC_CACHE[1]
    out = {}
    for var, sub in caches.items():
        if env.get(var) or f"{ACTOR_ENV}.{var}" in given:
            continue
        path = Path(root).expanduser() / sub
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        out[var] = str(path)
    if PYC_CACHE[0] in out and env.get(NO_PYC):
        out[NO_PYC] = ""
    return out
