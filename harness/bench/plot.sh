#!/bin/sh
# plot.sh CSV [PREFIX]: the pictures of a kernel-lab CSV (inkling-moe lab --csv; columns in
# harness/lab.h): for each (shape, variant) in it, PREFIX-SHAPE-VARIANT.png (PREFIX: the CSV's
# path without .csv) with two panels across T: the achieved bandwidth of every stage and of the
# whole layer against the 4.2 TB/s copy ceiling, and the achieved bf16 FLOP rate of the stages
# that compute against the 780 TFLOP/s ceiling (contract.md [floors]). Needs gnuplot only (the
# Debian package gnuplot-nox), so any machine can draw it from the CSV alone. Lines starting
# with '#' are comments.
set -eu
csv=${1:?usage: plot.sh CSV [PREFIX]}
prefix=${2:-${csv%.csv}}
command -v gnuplot >/dev/null 2>&1 || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
[ -r "$csv" ] || { echo "plot.sh: cannot read $csv" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One data file per (shape, variant, stage): "T GB/s TFLOP/s", in T order; a list of the pairs.
awk -F, -v dir="$work" '
    /^#/ || $1 == "shape" || NF < 11 { next }
    {
        pair = $1 "," $2
        if (!(pair in seen)) { seen[pair] = ++npairs; print $1 "," $2 > (dir "/pairs") }
        key = pair SUBSEP $4
        if (!(key in stage)) {
            stage[key] = ++nstages[pair]
            print $4 > (dir "/p" seen[pair] "-names")
        }
        f = dir "/p" seen[pair] "-s" stage[key] ".dat"
        print $3, $9, $10 > f
    }' "$csv"
[ -s "$work/pairs" ] || { echo "plot.sh: no rows in $csv" >&2; exit 1; }
# A stage keeps its colour in both panels (past 8 stages, dashed); the whole layer (timed stage
# by stage, and as the serving graph) and the two calls' host clocks stand out.
style() {
    case "$2" in
    "layer on device") echo "linespoints lw 3 lc rgb 'black'" ;;
    "forward call") echo "linespoints lw 2 dt 3 lc rgb 'gray40'" ;;
    "device-pointer call") echo "linespoints lw 2 dt 2 lc rgb 'dark-cyan'" ;;
    "serving graph") echo "linespoints lw 3 lc rgb 'dark-red'" ;;
    *) echo "linespoints lw 1 lc $1 pt $1 dt $((($1 - 1) / 8 + 1))" ;; # gnuplot has 8 colours
    esac
}
# The plot clauses of pair N's stages for data column COL (2: GB/s, 3: TFLOP/s), T ascending; a
# stage with no positive value there (no FLOPs: route, group, copies) is left out.
curves() {
    i=0
    while IFS= read -r name; do
        i=$((i + 1))
        f="$work/p$1-s$i.dat"
        sort -n "$f" | awk -v c="$2" '$c > 0' > "$f.$2"
        [ -s "$f.$2" ] || continue
        printf ", '%s' using 1:%s with %s title '%s'" "$f.$2" "$2" "$(style "$i" "$name")" "$name"
    done < "$work/p$1-names"
}
n=0
while IFS=, read -r shape variant; do
    n=$((n + 1))
    out="$prefix-$shape-$variant.png"
    gp="$work/p$n.gp"
    {
        echo "set terminal pngcairo size 1600,700 font ',10'"
        echo "set output '$out'"
        echo "set multiplot layout 1,2 title '$shape, $variant: achieved rate per stage against the H200 ceilings (contract.md [floors])'"
        echo "set logscale xy; set grid; set key outside right top vertical font ',8'"
        echo "set xlabel 'tokens T'"
        echo "set ylabel 'GB/s'; set yrange [*:8400]"
        printf "plot 4200 with lines lw 2 dt 2 lc rgb 'red' title 'copy ceiling 4.2 TB/s'"
        curves "$n" 2
        echo
        echo "set ylabel 'TFLOP/s'; set yrange [*:1560]"
        printf "plot 780 with lines lw 2 dt 2 lc rgb 'red' title 'bf16 ceiling 780 TFLOP/s'"
        curves "$n" 3
        echo
        echo "unset multiplot"
    } > "$gp"
    gnuplot "$gp"
    echo "plot.sh: wrote $out"
done < "$work/pairs"
