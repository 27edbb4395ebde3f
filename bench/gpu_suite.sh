#!/usr/bin/env bash
# Issue 3's measurements on one CUDA machine with vLLM-Omni installed, one step after another.
# Each step starts its own engine in its own process group, which is killed afterwards so the
# next step finds the GPU empty. Logs and JSON results go to LOG_DIR/<step>.log / .json.
#
#   bash bench/gpu_suite.sh MODEL_DIR LOG_DIR STEP...
#
#   test       the gpu-marked pytest (tests/test_gpu_engine.py)
#   table      raw / adapter / worker at concurrency 1 4 16 64, 2 waves, TTFA (Narrator config)
#   fast       CUDA graphs for 8 batch sizes instead of 19: start time, c=16 and c=64
#   restart    the fast config started again: start time with warm compile caches
#   talker128  the talker batching 128 sequences, Code2Wav 64: c=64 and c=128
#   frames     segment length: 125, 250 and 500 frames at c=64
set -uo pipefail
MODEL=${1:?usage: gpu_suite.sh MODEL_DIR LOG_DIR STEP...} LOG=${2:?LOG_DIR}; shift 2
mkdir -p "$LOG"
export OUT="$LOG" NARRATOR_CACHE_DIR="${NARRATOR_CACHE_DIR:-/tmp/narrator-cache}"
bench() { python3 -m bench.gpu_engine --model "$MODEL" "$@"; }

gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 || echo 0; }

run_step() {
  case $1 in
    test) NARRATOR_TEST_GPU_MODEL="$MODEL" python3 -m pytest -m gpu tests/test_gpu_engine.py \
            -p no:cacheprovider -o addopts="" -v ;;
    table) bench --label table --concurrency 1 4 16 64 --reps 2 --waves 2 ;;
    fast) bench --label fast_start --deploy-config bench/deploy/fast_start.yaml \
            --concurrency 16 64 --reps 2 --waves 2 --ttfa-reps 3 ;;
    restart) bench --start-only --deploy-config bench/deploy/fast_start.yaml ;;
    talker128) bench --label talker128 --deploy-config bench/deploy/talker128.yaml \
                 --concurrency 64 128 --reps 1 --waves 2 --ttfa-reps 0 ;;
    frames) bench --label frames --frames 125 250 500 --concurrency 64 --reps 1 --waves 2 \
              --ttfa-reps 0 ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

for step in "$@"; do
  echo "=== $step start $(date +%T) gpu $(gpu_used)MiB" | tee -a "$LOG/suite.log"
  t=$(date +%s)
  setsid bash -c "$(declare -f bench run_step); MODEL='$MODEL'; run_step $step" \
    >"$LOG/$step.log" 2>&1 &
  pid=$!
  wait $pid; rc=$?
  kill -9 -- -$pid 2>/dev/null  # the engine's stage processes outlive os._exit
  for _ in $(seq 60); do [ "$(gpu_used)" -lt 2000 ] && break; sleep 1; done
  echo "=== $step rc=$rc $(( $(date +%s) - t ))s" | tee -a "$LOG/suite.log"
  grep -E "^RESULT|^\||passed|failed|Error" "$LOG/$step.log" | tail -40 >>"$LOG/suite.log"
done
