#!/usr/bin/env bash
# The library the device runs, fixed at a commit, while the checkout may hold others' unfinished edits.
#   here:    bash scripts/gpu/snapshot.sh            -> .gpu/src/src.tgz (git archive of HEAD: the code a job
#                                                       needs, ~0.5 MB) + .gpu/src/COMMIT; carry ".gpu/src"
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
  cp -r scripts/gpu/. "$HEAD_DIR/scripts/gpu/"
  cp .gpu/src/COMMIT "$HEAD_DIR/COMMIT"
  echo "library at $(cat "$HEAD_DIR/COMMIT") in $HEAD_DIR (scripts/gpu from the working tree)"
  exit 0
fi
mkdir -p .gpu/src
git archive --format=tar.gz -o .gpu/src/src.tgz HEAD bootstrap conf hydra_plugins rayjobs scripts pyproject.toml .gitignore
git rev-parse HEAD > .gpu/src/COMMIT
ls -la .gpu/src; cat .gpu/src/COMMIT
