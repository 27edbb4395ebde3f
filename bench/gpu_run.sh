#!/usr/bin/env bash
# Run bench.gpu_product and then the gpu-marked test on the lent GPU, in the background, so
# that they outlive one device call (10 minutes at most); later calls wait and collect logs.
#
#   bash bench/gpu_run.sh start PART MODEL [gpu_product args]   # unpack, start, then wait
#     RAW_CONFIGS="a.yaml b.yaml+--whole+--env+K=V": first, raw AsyncOmni at 64 under each
#       deploy config ('default': vLLM-Omni's own), with the extra bench.gpu_engine flags
#       after a + (each + becomes a space)
#     TRACE=1: trace the engine (NARRATOR_ENGINE_TRACE) in every run; bench.engine_trace's
#       table of where first audio goes is written beside each trace (trace_*.txt)
#     TEST=0: skip the gpu-marked test
#     PRODUCT2="args": after the test, a second bench.gpu_product run with these arguments
#       (product2.log); PRODUCT3="args": then a third (product3.log), for an A/B/A pair
#     PRODUCT=0: skip bench.gpu_product (raw runs and the test only)
#     PICK=1: the product and the test then run under the config that
#       bench.pick_config picks from them (its docstring says how)
#   bash bench/gpu_run.sh wait                                   # wait, copy logs to $OUT
#
# `start` needs the RECIPE's dev_setup.sh and dev_build.sh done first (/tmp/site, MODEL).
# Carrying the parts (64 MiB a call with the working tree, about 14 MiB of it the repo): join
# ../shared/gpu/pack.sh's all.part.00 and all.part.01 and bench/gpu_pack.sh's narrator.part,
# `split -n 3` the whole into three ignored .xfer1-3 folders (the RECIPE's scripts beside the
# first). Call 1 moves the first chunk to /tmp/x; call 2 the second, cuts all.part.00 and .01
# back out (head -c, tail -c), checks SHA256SUMS and starts dev_setup.sh and dev_build.sh in the
# background (setsid); call 3 cuts narrator.part out of the three (tail -c +<both parts' size
# + 1>) and runs `start` (about a minute of device time before the first run).
# Runs from a copy of the repo in /tmp/nrepo: the device copies the working tree again on
# every call. Logs: /tmp/gpo (product.log, test.log, the processes' logs, done).
set -uo pipefail
LOGS=/tmp/gpo
case ${1:?usage: gpu_run.sh start PART MODEL [args] | wait} in
  start)
    PART=${2:?PART} MODEL=${3:?MODEL}; shift 3
    bash bench/gpu_unpack.sh "$PART" 2>&1 | tee "${OUT:-/tmp}/unpack.log" || exit 1
    printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/redis/usr/lib/x86_64-linux-gnu exec %s "$@"\n' \
      /tmp/redis/usr/bin/redis-server > /tmp/redis-run && chmod +x /tmp/redis-run
    rm -rf /tmp/nrepo "$LOGS" && mkdir -p /tmp/nrepo "$LOGS"
    tar --exclude='./.xfer*' -cf - . | tar -C /tmp/nrepo -xf -
    cat > /tmp/gpu_run_job.sh <<'JOB'
source /tmp/x/dev_env.sh
export PYTHONPATH=/tmp/site:/tmp/nsite:/tmp/nrepo OUT=$LOGS PATH=/tmp/nsite/bin:$PATH
cd /tmp/nrepo
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
step() {  # run in a process group of its own, then kill what is left (engine stages)
  setsid -w "$@" & local pid=$!; wait $pid; local rc=$?; kill -9 -- -$pid 2>/dev/null
  for _ in $(seq 60); do [ "$(gpu_used)" -lt 2000 ] && break; sleep 1; done; return $rc
}
python3 -c 'import scipy.signal' 2>/dev/null || {
  export NARRATOR_LOUDNESS_LUFS=0; echo "no scipy: loudness off" >> $LOGS/product.log; }
traced() {  # $1: the run's name; prints the --env flag that traces it
  [ "$TRACE" = 1 ] && echo "--env NARRATOR_ENGINE_TRACE=$LOGS/trace_$1.jsonl"
}
trace_table() {
  [ -f $LOGS/trace_$1.jsonl ] && python3 -m bench.engine_trace $LOGS/trace_$1.jsonl \
    > $LOGS/trace_$1.txt 2>&1
}
for entry in $RAW_CONFIGS; do  # raw AsyncOmni at 64 in flight under other deploy configs
  config=${entry%%+*}; extra=""; [ "$config" != "$entry" ] && extra=${entry#*+}
  extra=${extra//+/ }; name=$(basename "$config" .yaml)$(echo "$extra" | tr -c 'A-Za-z0-9\n' _)
  step python3 -m bench.gpu_engine --model $MODEL --paths raw --concurrency 64 --frames 250 \
    --reps 1 --waves 6 --ttfa-reps ${TTFA_REPS:-5} --ttfa-load 64 --deploy-config "$config" \
    --label "raw_$name" $extra $(traced "raw_$name") > $LOGS/raw_$name.log 2>&1
  echo "raw $name rc=$? config=$config" >> $LOGS/raws
  trace_table "raw_$name"
done
if [ "$PICK" = 1 ] && [ -n "$RAW_CONFIGS" ]; then  # the product and the test run under it
  picked=$(python3 -m bench.pick_config $LOGS/raws) && {
    export NARRATOR_VLLM_DEPLOY_CONFIG=/tmp/nrepo/$picked
    ARGS="$ARGS --env NARRATOR_VLLM_DEPLOY_CONFIG=$NARRATOR_VLLM_DEPLOY_CONFIG"
    echo "picked $picked" >> $LOGS/raws; }
fi
if [ "$PRODUCT" = 1 ]; then
  step python3 -m bench.gpu_product --model $MODEL --redis-server /tmp/redis-run $ARGS \
    $(traced product) >> $LOGS/product.log 2>&1
  echo "product rc=$?" >> $LOGS/done
  trace_table product
else
  echo "product rc=skipped" >> $LOGS/done
fi
if [ "$TEST" = 1 ]; then
  export NARRATOR_TEST_GPU_MODEL=$MODEL
  step python3 -m pytest -m gpu tests/test_gpu_engine.py -p no:cacheprovider -o addopts="" -v \
    > $LOGS/test.log 2>&1
  echo "test rc=$?" >> $LOGS/done
else
  echo "test rc=skipped" >> $LOGS/done
fi
for n in 2 3; do  # after the test: more runs, other arguments, each its own folder
  name=PRODUCT$n; extra=${!name}
  if [ -n "$extra" ]; then
    OUT=$LOGS/run$n step python3 -m bench.gpu_product --model $MODEL \
      --redis-server /tmp/redis-run $extra >> $LOGS/product$n.log 2>&1
    echo "product$n rc=$?" >> $LOGS/done
  else
    echo "product$n rc=skipped" >> $LOGS/done
  fi
done
JOB
    MODEL=$MODEL LOGS=$LOGS ARGS="$*" RAW_CONFIGS="${RAW_CONFIGS:-}" TEST="${TEST:-1}" \
      TRACE="${TRACE:-0}" PRODUCT2="${PRODUCT2:-}" PRODUCT3="${PRODUCT3:-}" \
      PRODUCT="${PRODUCT:-1}" PICK="${PICK:-0}" TTFA_REPS="${TTFA_REPS:-5}" \
      setsid nohup bash /tmp/gpu_run_job.sh > "$LOGS/job.out" \
      2>&1 < /dev/null &
    exec bash "$0" wait ;;
  wait)
    # A machine handed back between calls (30 s idle) comes back fresh: nothing to wait for.
    [ -d "$LOGS" ] || { echo "no run on this machine ($LOGS missing): it was handed back" \
      "and started afresh; start again" >&2; exit 3; }
    end=$(( $(date +%s) + ${WAIT_S:-560} ))
    while [ "$(date +%s)" -lt "$end" ] && [ "$(grep -c rc= $LOGS/done 2>/dev/null)" != 4 ]; do
      sleep 10
    done
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    cat $LOGS/done $LOGS/raws 2>/dev/null; tail -40 $LOGS/product.log
    for n in 2 3; do grep -v '^CPU' $LOGS/product$n.log 2>/dev/null | tail -16; done
    tail -5 $LOGS/test.log 2>/dev/null; grep -h "^RESULT" $LOGS/raw_*.log 2>/dev/null
    for t in $LOGS/trace_*.txt; do [ -f "$t" ] && echo "== $t" && tail -6 "$t"; done
    mkdir -p "${OUT:-/tmp/out}"  # one archive: the device returns at most 8 files
    (cd / && find tmp/gpo -path tmp/gpo/services -prune -o \( -name '*.log' -o -name '*.json' -o -name 'trace_*' -o -name 'worker_spy*' \) \
       -size -200M -print; ls tmp/nrepo/bench/results/*.json) 2>/dev/null \
      | tar -czf "${OUT:-/tmp/out}/gpu_run_logs.tgz" -C / -T -
    cp $LOGS/product.log "${OUT:-/tmp/out}/" 2>/dev/null || true ;;
esac
