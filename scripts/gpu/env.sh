# Source on the GPU machine (repo root as cwd): the environment the tiny verl run needs there.
# Everything Ray starts inherits it, because the embedded head is started from this shell.
export SITE=${SITE:-/root/site}                      # the unpacked bundle (scripts/gpu/bundle.sh)
export REPO=${REPO:-$(pwd)}
export PYTHONPATH=$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}
export PATH=$SITE/bin:$PATH
export RAYJOBS_HOME=${RAYJOBS_HOME:-/root/rj}        # ledger, embedded head, storage root ($RAYJOBS_HOME/storage)
export PYTHONUNBUFFERED=1
# vLLM 0.24 on this machine (../shared/notes/gpu-machine.md): no flashinfer; the engine process
# deadlocks in an OpenMP pool unless OMP_NUM_THREADS=1 together with spawn.
export VLLM_USE_FLASHINFER_SAMPLER=0 OMP_NUM_THREADS=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
# NVLink multicast stays off on these hosts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
