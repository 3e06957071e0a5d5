#!/usr/bin/env bash
# Issue 63's checks on a lent GPU machine, as one command (about 3-4 minutes on an H200, under 8 on one
# H100-class GPU): nvidia-smi, the smoke checks (`dkilab gpu --smoke-only`) and `dkilab bench gpu` at the
# 7-8B shapes, all written to OUT for docs/gpu/<date>-<device>/. The node needs torch, transformers and
# accelerate; the rest comes from the wheelhouse, installed into OUT/.site (the node's Python is not touched):
#
#   make wheelhouse WHEEL_PYTHON=3.12        # here, for the node's Python; carry wheelhouse/ along
#   bash scripts/gpu-check.sh OUT            # there, from the repository
#   bash scripts/gpu-check.sh OUT --cpu      # the same path on a CPU (tiny shapes), to try it first
set -euo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT [--cpu]}
cpu=${2:-}
mkdir -p "$out"
nvidia-smi > "$out/nvidia.txt" 2>&1 || echo "no nvidia-smi here" > "$out/nvidia.txt"
if [ -f wheelhouse/requirements.txt ]; then
    python3 -m pip install --quiet --no-index --find-links wheelhouse --target "$out/.site" -r wheelhouse/requirements.txt
fi
export PYTHONPATH="$PWD:$out/.site" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$SECONDS
python3 -m dkilab.cli gpu --smoke-only $cpu --report-dir "$out" 2>&1 | tee "$out/smoke.log" | tail -5
smoke=${PIPESTATUS[0]}
echo "smoke: exit $smoke in $((SECONDS - start)) s"
python3 -m dkilab.bench.gpu --out "$out" --repeats 3 $cpu 2>&1 | tee "$out/bench.log" | tail -3
echo "smoke and bench: $((SECONDS - start)) s"
rm -rf "$out/.site"
exit "$smoke"
