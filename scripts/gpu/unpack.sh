#!/usr/bin/env bash
# On the GPU machine. Two uses:
#   unpack.sh stash      -> copy the carried part(s) .gpu/p*/site.part.* into /root/stash (calls 1..K-1)
#   unpack.sh install    -> stash the carried part too, then join all parts and unpack the bundle
#                           into /root/site (skipped when /root/site/.complete exists)
set -euo pipefail
STASH=${STASH:-/root/stash}
SITE=${SITE:-/root/site}
mkdir -p "$STASH"
cp -f .gpu/p*/site.part.* "$STASH"/ 2>/dev/null || true
ls -la "$STASH"
[ "${1:-stash}" = install ] || exit 0
[ -f "$SITE/.complete" ] && { echo "bundle already unpacked in $SITE"; exit 0; }
t0=$(date +%s)
mkdir -p "$(dirname "$SITE")"
if command -v xz >/dev/null; then
  cat "$STASH"/site.part.* | xz -dc -T0 | tar -xf - -C "$(dirname "$SITE")"
else
  cat "$STASH"/site.part.* | python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.stdin.buffer),mode='r|').extractall('$(dirname "$SITE")')"
fi
touch "$SITE/.complete"
echo "unpacked $(du -sh "$SITE" | cut -f1) into $SITE in $(( $(date +%s) - t0 )) s"
