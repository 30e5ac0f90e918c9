#!/usr/bin/env bash
# Here (not on the GPU machine): the Python packages the tiny verl run needs there, pre-installed
# for Python 3.12 and packed as xz parts of at most PART_MIB (60) MiB, one per device call.
#   scripts/gpu/bundle.sh [OUT]      -> OUT/p0/site.part.00, OUT/p1/site.part.01, ... (OUT: .gpu)
# OUT is relative to the repo root (or absolute). `carry` names OUT/pK, so for the device calls OUT
# must be an ignored folder inside the checkout (.gpu is in .gitignore); elsewhere it only builds.
# Its scratch (the wheels, the installed tree, the tar.xz: ~1.2 GB) is OUT/w, OUT/site, OUT/site.tar.xz.
# Needs PREPARE (default ../shared/gpu/prepare.sh, beside the checkout: it downloads the wheels of
# ../shared/notes/gpu-wheels.txt from the package registries) unless OUT/parts exists already.
# PART_MIB: a carry is at most 64 MiB with the working tree (~2.4 MiB): 60 leaves ~1.5 MiB spare;
# PART_MIB=50 leaves more room and makes 4 parts (one more device call).
# The wheels are prepare.sh's (verl 0.9.1, vLLM 0.24.0 slimmed, Ray 2.60 slimmed,
# TransferQueue, tensordict, hydra-core 1.3.8, omegaconf 2.4.0, ...) plus transformers 5.9.0 and
# tokenizers 0.22.2 (verl 0.9.1[vllm] pins transformers==5.9.0; the machine has 5.17, and 5.9
# accepts tokenizers <=0.23.0, the machine has 0.23.2). The machine already has rich, click,
# markdown-it-py, mdurl, pygments, pyyaml, requests, pyarrow, torch 2.11: not carried.
# Installing here (pip --target with the 3.12 tags) and shipping the unpacked tree as tar.xz makes
# it 3 parts instead of 5 and skips pip there; console scripts get `#!/usr/bin/env python3`.
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${1:-.gpu}
PART_MIB=${PART_MIB:-60}
PREPARE=${PREPARE:-../shared/gpu/prepare.sh}
mkdir -p "$G"
if [ ! -d "$G/parts" ]; then
  [ -f "$PREPARE" ] || { echo "bundle.sh: $PREPARE not found (set PREPARE=path/to/prepare.sh, or put the wheels' parts in $G/parts)" >&2; exit 2; }
  bash "$PREPARE" "$G/parts"
fi
rm -rf "$G/w" "$G/site" && mkdir -p "$G/w"
cat "$G"/parts/p*/part.* | tar -xf - -C "$G/w"
plat="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform any"
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
         manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  plat="$plat --platform $p"
done
python3 -m pip download -q --no-deps $plat -d "$G/w" transformers==5.9.0 tokenizers==0.22.2
python3 -m pip install -q --no-index --no-deps --no-compile $plat --target "$G/site" "$G"/w/*.whl
for f in "$G"/site/bin/*; do
  if head -c2 "$f" | grep -q '#!'; then sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; fi
done
rm -f "$G/site.tar.xz" "$G"/p*/site.part.*
tar -cf - -C "$G" site | xz -T0 -2 > "$G/site.tar.xz"   # -2: 187 MB in 2 min on 2 busy cores (-6: 171 MB, >15 min there)
(cd "$G" && split -b "${PART_MIB}m" -d site.tar.xz site.part.)
i=0
for part in "$G"/site.part.*; do mkdir -p "$G/p$i"; mv "$part" "$G/p$i/"; i=$((i + 1)); done
ls -la "$G"/p*/
echo "$(ls "$G/w" | wc -l) wheels, $(du -sh "$G/site" | cut -f1) installed, $i parts of at most $PART_MIB MiB in $G"
