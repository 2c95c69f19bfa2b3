#!/usr/bin/env bash
# Every learning curve in docs/learning.md. Each command starts its own throwaway
# Reflexa (ONNX MiniLM, SQLite); JSON and markdown go to examples/results/, the
# plots to docs/learning/. About 40 minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
run() {
  local name=$1; shift
  nice -n 10 python -m examples.learning "$@" --seeds 3 --episodes 60 --block 10 --plot "docs/learning/$name.png"
}

run babyai-scene-pool    --env babyai-goto --view scene  --regime pool
run babyai-scene-novel   --env babyai-goto --view scene  --regime novel
run babyai-target-pool   --env babyai-goto --view target --regime pool
run babyai-target-novel  --env babyai-goto --view target --regime novel
run coin-pool            --env twx-coin --regime pool
run coin-novel           --env twx-coin --regime novel
run twc-pool             --env twx-twc --regime pool
run twc-novel            --env twx-twc --regime novel
run cookingworld-pool    --env twx-cookingworld --regime pool
run cookingworld-novel   --env twx-cookingworld --regime novel
# Ranking ablation: the server's default utility weight (0.5) instead of 0.
mkdir -p examples/results/utility-0.5
run babyai-scene-pool-utility-0.5 --env babyai-goto --view scene --regime pool --utility-weight 0.5 --out examples/results/utility-0.5
run coin-pool-utility-0.5 --env twx-coin --regime pool --utility-weight 0.5 --out examples/results/utility-0.5

python -m examples.summarize examples/results/*.json examples/results/utility-0.5/*.json
