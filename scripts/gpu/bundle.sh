#!/usr/bin/env bash
# Here (not on the GPU machine): the Python packages the tiny verl run needs there, pre-installed
# for Python 3.12 and packed as xz parts of at most 60 MiB, one per device call.
#   scripts/gpu/bundle.sh            -> .gpu/p0/site.part.00, .gpu/p1/site.part.01, ...
# The wheels are ../shared/gpu/prepare.sh's (verl 0.9.1, vLLM 0.24.0 slimmed, Ray 2.60 slimmed,
# TransferQueue, tensordict, hydra-core 1.3.8, omegaconf 2.4.0, ...) plus transformers 5.9.0 and
# tokenizers 0.22.2 (verl 0.9.1[vllm] pins transformers==5.9.0; the machine has 5.17, and 5.9
# accepts tokenizers <=0.23.0, the machine has 0.23.2). The machine already has rich, click,
# markdown-it-py, mdurl, pygments, pyyaml, requests, pyarrow, torch 2.11: not carried.
# Installing here (pip --target with the 3.12 tags) and shipping the unpacked tree as tar.xz makes
# it 3 parts instead of 5 and skips pip there; console scripts get `#!/usr/bin/env python3`.
set -euo pipefail
cd "$(dirname "$0")/../.."
G=.gpu
mkdir -p $G
[ -d $G/parts ] || bash ../shared/gpu/prepare.sh $G/parts
rm -rf $G/w $G/site && mkdir -p $G/w
cat $G/parts/p*/part.* | tar -xf - -C $G/w
plat="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform any"
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
         manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  plat="$plat --platform $p"
done
python3 -m pip download -q --no-deps $plat -d $G/w transformers==5.9.0 tokenizers==0.22.2
python3 -m pip install -q --no-index --no-deps --no-compile $plat --target $G/site $G/w/*.whl
for f in $G/site/bin/*; do
  if head -c2 "$f" | grep -q '#!'; then sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; fi
done
rm -f $G/site.tar.xz $G/p*/site.part.*
tar -cf - -C $G site | xz -T0 -2 > $G/site.tar.xz   # -2: 187 MB in 2 min on 2 busy cores (-6: 171 MB, >15 min there)
(cd $G && split -b 60m -d site.tar.xz site.part.)
i=0
for part in $G/site.part.*; do mkdir -p $G/p$i; mv "$part" $G/p$i/; i=$((i + 1)); done
ls -la $G/p*/
echo "$(ls $G/w | wc -l) wheels, $(du -sh $G/site | cut -f1) installed, $i parts"
