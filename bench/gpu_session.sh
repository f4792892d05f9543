#!/usr/bin/env bash
# Every check that needs a GPU, in one call: GPU time comes in short allotments, so one prepared script runs
# the actor MFU sweep (bench/actor_bench.py --gpu), the GPU tests (tests/gpu), the rollout decode
# benchmark (bench/rollout_bench.py --gpu; at TP2 with and without CUDA graphs, engine.cuda_graphs_tp, where
# there are >= 2 GPUs), one RL step at the 1.5B shape (bench/rl_step_bench.py --gpu),
# the memory plan against the device's allocations (bench/plan_check.py --gpu: static memory, update and
# generation peaks, offload) and the lag-1 split layout at the 1.5B shape against the synchronous loop
# (bench/lag_bench.py --gpu), each under its own time limit, and collects the logs, one
# kernel profile and the updated bench/RESULTS.md in $OUT (ten files, eleven with rollout_tp2).
#
#   OUT=/tmp/gpu bash bench/gpu_session.sh
#   STEPS="actor_bench gpu_tests" OUT=/tmp/gpu bash bench/gpu_session.sh      # only the named steps
#
# The default limits (ACTOR_LIMIT 240, TEST_LIMIT 150, ROLLOUT_LIMIT 120, ROLLOUT_TP2_LIMIT 150, RL_LIMIT 180,
# PLAN_LIMIT 150, LAG_LIMIT 240 s) add up to 1,230 s, more than one 600 s device call: run it as two or
# three calls with STEPS, or lower the limits.
#
# Needs a CUDA machine with torch and transformers. Packages it lacks (megatron-core, omegaconf, ...) sit as
# wheels in .whl/, downloaded beforehand by `bash bench/gpu_wheels.sh` (cp312, the versions of
# constraints-gpu.txt: the megatron-core that CI's Python 3.12 leg tests and the container installs); they
# are installed into /tmp/site first. The summary says when the megatron-core found is not that pin.
# Runs from the repository root, without installing nemo_lead (PYTHONPATH).
set -uo pipefail
OUT=${OUT:-/tmp/nemo_lead_gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
summary="$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$summary"
$PY -c "import sys, torch, megatron.core, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__,
'megatron-core', megatron.core.__version__, 'transformers', transformers.__version__)" 2>&1 | tee -a "$summary"
pinned=$(grep -oE '^megatron-core==\S+' constraints-gpu.txt | cut -d= -f3)
found=$($PY -c "import megatron.core; print(megatron.core.__version__)" 2>/dev/null)
if [ "$found" != "$pinned" ]; then
  echo "WARNING: megatron-core $found here, not constraints-gpu.txt's $pinned (run bench/gpu_wheels.sh first)" | tee -a "$summary"
fi

step() {  # step NAME SECONDS CMD...: run under a time limit, log to $OUT/NAME.log, exit status to the summary
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
    echo "$name: skipped (not in STEPS)" | tee -a "$summary"
    return
  fi
  echo "== $name"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  echo "$name: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s" | tee -a "$summary"
}

step actor_bench "${ACTOR_LIMIT:-240}" $PY bench/actor_bench.py --gpu --record --profile "$OUT/actor_profile.txt" \
  ${ACTOR_ARGS:-}
NEMO_LEAD_GPU_TESTS=1 step gpu_tests "${TEST_LIMIT:-150}" $PY -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu
step rollout_bench "${ROLLOUT_LIMIT:-120}" $PY bench/rollout_bench.py --gpu --record ${ROLLOUT_ARGS:-}
# the same step measures engine.kind=vllm on the same weights where vLLM imports (the plan's assumed fraction)
$PY -c "from nemo_lead.generation.vllm_engine import import_vllm; import_vllm()" >/dev/null 2>&1 \
  || echo "rollout_bench: engine.kind=vllm skipped (vLLM is not installed in this environment)" | tee -a "$summary"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt 2 ] && { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" rollout_tp2 "* ]]; }; then
  echo "rollout_tp2: skipped ($gpus GPU here; the TP2 decode measurement needs 2)" | tee -a "$summary"
else  # the decode step at TP2, eager against CUDA graphs with the all-reduces captured
  step rollout_tp2 "${ROLLOUT_TP2_LIMIT:-150}" $PY -m torch.distributed.run --standalone --nproc-per-node 2 \
    bench/rollout_bench.py --gpu --tp 2 --record ${ROLLOUT_ARGS:-}
fi
step rl_step_bench "${RL_LIMIT:-180}" $PY bench/rl_step_bench.py --gpu --record --out "$OUT/rl_step.json"
step plan_check "${PLAN_LIMIT:-150}" $PY bench/plan_check.py --gpu --record --out "$OUT/plan_check.json"
step lag_bench "${LAG_LIMIT:-240}" $PY bench/lag_bench.py --gpu --record --out "$OUT/lag.json"
cp bench/RESULTS.md "$OUT/RESULTS.md"
