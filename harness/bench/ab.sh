#!/bin/sh
# ab.sh [-r ROUNDS] [-o DIR] [-s STAGE] [-m PCT] [-c COMPARE_TOOL] BASELINE_TOOL CANDIDATE_TOOL [LAB_ARGS...]
#
# Is a change faster? Runs `TOOL lab LAB_ARGS --csv ...` with two builds of inkling-moe (the
# baseline, e.g. main, and the candidate), ROUNDS times each (default 4), one process after
# another and in turn, the first of a round alternating (baseline first in odd rounds), so that
# neither build always finds the GPU as the other left it. Then `lab-compare` (of
# COMPARE_TOOL, default the candidate) prints each (shape, variant, T) of STAGE (default the
# serving graph) side by side with the exact rank-sum p of the rounds' medians: four rounds a
# side can tell a difference apart, three cannot (harness/lab_compare.h).
#
# DIR (default a new folder under $TMPDIR or /tmp) keeps baseline.csv, candidate.csv and every run's log.
# -m PCT: exit 1 if the candidate is slower by more than PCT % where the test tells it apart.
# Exit 77 when the lab cannot run here (no GPU), with its reason; a run that fails stops it.
set -eu
rounds=4 dir="" stage="serving graph" slowdown="" compare=""
usage() { echo "usage: ab.sh [-r ROUNDS] [-o DIR] [-s STAGE] [-m PCT] [-c COMPARE_TOOL] BASELINE_TOOL CANDIDATE_TOOL [LAB_ARGS...]" >&2; exit 2; }
while getopts r:o:s:m:c: opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    o) dir=$OPTARG ;;
    s) stage=$OPTARG ;;
    m) slowdown=$OPTARG ;;
    c) compare=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || usage
case $rounds in '' | *[!0-9]*) echo "ab.sh: -r: '$rounds' is not a number of rounds" >&2; exit 2 ;; esac
[ "$rounds" -ge 1 ] && [ "$rounds" -le 16 ] || { echo "ab.sh: -r: 1 to 16 rounds (lab-compare keeps 16 a side)" >&2; exit 2; }
baseline=$1 candidate=$2
shift 2
for tool in "$baseline" "$candidate" ${compare:+"$compare"}; do
    [ -x "$tool" ] || { echo "ab.sh: $tool: not an executable inkling-moe" >&2; exit 2; }
done
[ -n "$compare" ] || compare=$candidate
if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ab.XXXXXX" 2>/dev/null) ||
        { echo "ab.sh: cannot make a folder under ${TMPDIR:-/tmp}; name one with -o" >&2; exit 2; }
fi
mkdir -p "$dir" 2>/dev/null || { echo "ab.sh: -o: cannot make the folder $dir" >&2; exit 2; }
[ ! -e "$dir/baseline.csv" ] && [ ! -e "$dir/candidate.csv" ] ||
    { echo "ab.sh: $dir already holds a comparison's CSVs; name a new folder" >&2; exit 2; }
echo "ab: $rounds rounds of \`lab $*\` into $dir; baseline $baseline, candidate $candidate"
round=1
while [ "$round" -le "$rounds" ]; do
    if [ $((round % 2)) -eq 1 ]; then order="baseline candidate"; else order="candidate baseline"; fi
    for side in $order; do
        if [ "$side" = baseline ]; then tool=$baseline; else tool=$candidate; fi
        log=$dir/$side-$round.log
        rc=0
        "$tool" lab "$@" --csv "$dir/$side.csv" >"$log" 2>&1 || rc=$?
        if [ "$rc" -eq 77 ]; then
            echo "ab: SKIPPED: the lab cannot run here: $(tail -n 1 "$log")"
            exit 77
        fi
        [ "$rc" -eq 0 ] || { echo "ab.sh: round $round: the $side's lab exited $rc; see $log" >&2; exit "$rc"; }
        echo "ab: round $round/$rounds: $side done"
    done
    round=$((round + 1))
done
exec "$compare" lab-compare --baseline "$dir/baseline.csv" --candidate "$dir/candidate.csv" \
    --stage "$stage" ${slowdown:+--max-slowdown "$slowdown"}
