#!/usr/bin/env bash
# Every learning curve in docs/learning.md, in the order they appear there.
# Each command starts its own throwaway Reflexa; results (JSON, markdown, PNG) go
# to examples/results/. About 15 minutes of CPU in all on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
run() { nice -n 10 python -m examples.learning "$@" --seeds 3 --episodes 60 --block 10; }

run --env babyai-goto --view scene --regime pool
run --env babyai-goto --view scene --regime novel
run --env babyai-goto --view target --regime pool
run --env babyai-goto --view target --regime novel
run --env twx-coin --regime pool
run --env twx-coin --regime novel
run --env twx-twc --regime pool
run --env twx-cookingworld --regime pool
