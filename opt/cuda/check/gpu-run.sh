#!/bin/bash
# gpu-run.sh STEP...: the CUDA path's verification on a GPU host, from the repository root.
# Logs go to $LOG_DIR (default build/gpu-logs); the last lines of each step are printed.
#   build    make all (BUILD=build/gpu); the carried libraries of gpu-deps.sh are used if present
#   test     every unit test (tests/run-tests.sh): test_cuda and test_golden run on the GPU
#   fuzz     the differential fuzzer, CUDA path only, smoke and ci suites (FUZZ_SECONDS, default 120)
#   nightly  the nightly suite's real-model cases on the CUDA path (sampled tokens)
#   realbf16 the real-size bf16 layers (suite real-bf16; about 40-90 GB of host memory)
#   san      compute-sanitizer memcheck and racecheck over smoke cases of the CUDA path
#   time     the kernel lab (inkling-moe lab): real-shape correctness on sampled tokens, per-stage timings
#   bench    make bench-cuda: every CUDA variant over T, CSV per stage and T (and its PNG if gnuplot is here)
set -u
LOG_DIR=${LOG_DIR:-build/gpu-logs}
B=build/gpu
TOOL=$B/bin/inkling-moe
mkdir -p "$LOG_DIR"
[ -d .gpu-deps ] && export PATH=$PWD/.gpu-deps/bin:$PATH
export PATH=/usr/local/cuda/bin:$PATH
step() { echo "== $1 ($(date -u +%H:%M:%S))"; }
for s in "$@"; do
  case "$s" in
  build)
    step build
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,memory.used --format=csv | tee "$LOG_DIR/gpu.txt"
    make -j"$(nproc)" BUILD=$B all > "$LOG_DIR/build.log" 2>&1; echo "build rc=$?"; grep -E "error" "$LOG_DIR/build.log" | head ;;
  test)
    step test
    sh tests/run-tests.sh $B > "$LOG_DIR/test.log" 2>&1; echo "test rc=$?"
    grep -E "^\[  (FAILED|SKIPPED) \]|golden cases on|^tests:" "$LOG_DIR/test.log" | sort | uniq -c | tail -20 ;;
  fuzz)
    step fuzz
    $TOOL fuzz --paths cuda --no-ref --suite smoke,ci --seconds "${FUZZ_SECONDS:-120}" --report-dir "$LOG_DIR/fuzz" \
      --regress-dir "$LOG_DIR/regressions" > "$LOG_DIR/fuzz.log" 2>&1; echo "fuzz rc=$?"; tail -12 "$LOG_DIR/fuzz.log" ;;
  nightly)
    step nightly
    $TOOL fuzz --paths cuda --no-ref --suite nightly --max-cases 10 --seconds 480 --report-dir "$LOG_DIR/nightly" \
      --regress-dir "$LOG_DIR/regressions" > "$LOG_DIR/nightly.log" 2>&1; echo "nightly rc=$?"; tail -12 "$LOG_DIR/nightly.log" ;;
  realbf16)
    step realbf16
    $TOOL fuzz --paths cuda --no-ref --suite real-bf16 --max-cases 3 --seconds 400 --report-dir "$LOG_DIR/realbf16" \
      --regress-dir "$LOG_DIR/regressions" > "$LOG_DIR/realbf16.log" 2>&1; echo "realbf16 rc=$?"; tail -8 "$LOG_DIR/realbf16.log" ;;
  san)
    step san
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool --error-exitcode 9 $TOOL fuzz --paths cuda --no-ref --suite smoke \
        --max-cases 40 --seconds 200 --no-shrink --report-dir "$LOG_DIR/san-$tool" --regress-dir "$LOG_DIR/regressions" \
        > "$LOG_DIR/san-$tool.log" 2>&1; echo "$tool rc=$?"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$LOG_DIR/san-$tool.log" | tail -3
    done ;;
  time)
    step time
    make BUILD=$B cuda-check > /dev/null 2>&1
    $TOOL lab --iters 30 > "$LOG_DIR/lab.log" 2>&1; echo "lab rc=$?"; tail -30 "$LOG_DIR/lab.log" ;;
  bench)
    step bench
    make BUILD=$B bench-cuda > "$LOG_DIR/bench-cuda.log" 2>&1; echo "bench-cuda rc=$?"
    grep -E "^T = |layer on device|SKIPPED|FAIL|plot.sh" "$LOG_DIR/bench-cuda.log" | tail -40 ;;
  *) echo "gpu-run: unknown step $s"; exit 2 ;;
  esac
done
