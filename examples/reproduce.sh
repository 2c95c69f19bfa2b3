#!/usr/bin/env bash
# Every learning curve in docs/learning.md, on the server's defaults (the namespace
# sets only its state text). Each command starts its own throwaway Reflexa (ONNX
# MiniLM, SQLite); JSON and markdown go to examples/results/defaults/, the plots to
# docs/learning/<name>-defaults.png. About 75 minutes on two busy cores.
set -euo pipefail
cd "$(dirname "$0")/.."
run() {
  local name=$1 suffix=$2 out=$3; shift 3
  mkdir -p "$out"
  nice -n 10 python -m examples.learning "$@" --seeds 3 --episodes 60 --block 10 \
    --out "$out" --plot "docs/learning/$name-$suffix.png"
}
defaults() { local name=$1; shift; run "$name" defaults examples/results/defaults "$@"; }

defaults babyai-scene-pool    --env babyai-goto --view scene  --regime pool
defaults babyai-scene-novel   --env babyai-goto --view scene  --regime novel
defaults babyai-target-pool   --env babyai-goto --view target --regime pool
defaults babyai-target-novel  --env babyai-goto --view target --regime novel
defaults coin-pool            --env twx-coin --regime pool
defaults coin-novel           --env twx-coin --regime novel
defaults twc-pool             --env twx-twc --regime pool
defaults twc-novel            --env twx-twc --regime novel
defaults cookingworld-pool    --env twx-cookingworld --regime pool
defaults cookingworld-novel   --env twx-cookingworld --regime novel
# Ranking ablation: similarity alone within the band (utility_weight 0) instead of
# the server's 0.5, and the agent crediting only what it acted on (item_ids).
run babyai-scene-pool utility-0 examples/results/utility-0 --env babyai-goto --view scene --regime pool \
  --utility-weight 0 --agents reflexa
run coin-pool utility-0 examples/results/utility-0 --env twx-coin --regime pool --utility-weight 0 --agents reflexa
run twc-pool utility-0 examples/results/utility-0 --env twx-twc --regime pool --utility-weight 0 --agents reflexa
run coin-pool credit-acted-defaults examples/results/credit-acted --env twx-coin --regime pool \
  --agents reflexa,reflexa-acted

python -m examples.summarize examples/results/defaults/*.json
