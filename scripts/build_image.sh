#!/usr/bin/env bash
# Build the one rayjobs cluster image (bootstrap/Dockerfile), tagged with the commit it is built from.
#   scripts/build_image.sh REGISTRY/NAME [--push]
# Prints the image reference for `rayjobs up image=...` (or `cluster.image` in the settings) on stdout.
# Refuses a checkout with uncommitted changes: the tag must name exactly what is inside.
set -euo pipefail
repo=${1:-}
if [ -z "$repo" ] || [[ "$repo" == *:* && "$repo" != *@* && "${repo##*/}" == *:* ]]; then
  echo "error: give the image repository without a tag (the tag is the commit): scripts/build_image.sh REGISTRY/NAME [--push]" >&2
  exit 2
fi
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "error: uncommitted changes in $(pwd): commit them first (the image's tag names the commit it was built from)" >&2
  exit 2
fi
commit=$(git rev-parse HEAD)
tag="$repo:${commit:0:12}"
echo "building $tag from commit $commit" >&2
docker build -f bootstrap/Dockerfile --build-arg "RAYJOBS_COMMIT=$commit" -t "$tag" . >&2
if [ "${2:-}" = "--push" ]; then
  docker push "$tag" >&2
fi
echo "docker:$tag"
