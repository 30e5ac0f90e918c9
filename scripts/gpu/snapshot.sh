#!/usr/bin/env bash
# The library the device runs, fixed at a commit, while the checkout may hold others' unfinished edits.
#   here:    bash scripts/gpu/snapshot.sh [GPU_DIR]  -> GPU_DIR/src/src.tgz (git archive of this checkout's HEAD:
#                                                       the code a job needs, ~0.5 MB) + GPU_DIR/src/COMMIT;
#                                                       carry ".gpu/src". GPU_DIR (default .gpu here): another
#                                                       checkout's .gpu, for a helper whose worktree is not the
#                                                       checkout the device copies (its scripts/gpu then come
#                                                       from the snapshot: NO_OVERLAY)
#   device:  bash scripts/gpu/snapshot.sh unpack     -> /root/head: that tree, with this checkout's
#                                                       scripts/gpu over it (the scripts being tried);
#                                                       then `cd /root/head` and run team.sh etc. there
# Read-only on git (git archive); nothing in the checkout changes but .gpu/src (ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
HEAD_DIR=${HEAD_DIR:-/root/head}
if [ "${1:-here}" = unpack ]; then
  mkdir -p "$HEAD_DIR"
  tar -xzf .gpu/src/src.tgz -C "$HEAD_DIR"
  [ -f .gpu/src/NO_OVERLAY ] || cp -r scripts/gpu/. "$HEAD_DIR/scripts/gpu/"
  cp .gpu/src/COMMIT "$HEAD_DIR/COMMIT"
  echo "library at $(cat "$HEAD_DIR/COMMIT") in $HEAD_DIR (scripts/gpu from $([ -f .gpu/src/NO_OVERLAY ] && echo the snapshot || echo the working tree))"
  exit 0
fi
G=${1:-.gpu}
mkdir -p "$G/src"
git archive --format=tar.gz -o "$G/src/src.tgz" HEAD bootstrap conf hydra_plugins rayjobs scripts pyproject.toml .gitignore
git rev-parse HEAD > "$G/src/COMMIT"
if [ "$(realpath -m "$G")" != "$(realpath -m .gpu)" ]; then touch "$G/src/NO_OVERLAY"; else rm -f "$G/src/NO_OVERLAY"; fi
ls -la "$G/src"; cat "$G/src/COMMIT"
