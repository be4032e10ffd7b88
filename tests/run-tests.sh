#!/bin/sh
# run-tests.sh BUILD: runs every test binary under BUILD/tests, cmocka's summary lines included,
# then prints one closing line "N passed, N failed, N skipped" counted over all of them.
set -u
build=${1:-build}
export INKLING_BUILD="$build"   # test_cli finds the tool here
passed=0; failed=0; skipped=0; bad_bins=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
    if [ $rc -ne 0 ] && [ -z "$f" ]; then failed=$((failed + 1)); bad_bins="$bad_bins $t"; fi
done
[ -n "$bad_bins" ] && echo "binaries that exited non-zero without a cmocka failure:$bad_bins"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
