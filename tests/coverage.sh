#!/bin/sh
# coverage.sh BUILD: line and branch coverage of common/, ref/ and opt/blas/ from the .gcda
# files that the runs of a --coverage build left under BUILD/obj (make coverage). Prints one
# line per source file and the totals; writes each annotated source to BUILD/gcov/FILE.gcov
# (gcov's format: "#####" marks a line never run, "branch N never executed" or "taken 0" a
# branch never taken). Only the source's own lines count, not the headers inlined into it.
set -u
build=${1:-build/coverage}
out="$build/gcov"
mkdir -p "$out"
printf '%-30s %16s %20s\n' "file" "lines" "branches taken"
for src in common/*.c ref/*.c opt/blas/*.c; do
    obj="$build/obj/$(dirname "$src")"
    [ -f "$obj/$(basename "$src" .c).gcno" ] || continue
    gcov -b -c -t -o "$obj" "$src" 2>/dev/null > "$out/$(basename "$src").gcov"
    awk -v src="$src" '
        /^ *-: *0:Source:/ { sub(/^ *-: *0:Source:/, ""); mine = ($0 == src); next }
        !mine { next }
        /^branch/ { nb++; if ($3 == "taken" && $4 + 0 > 0) hb++; next }
        { f = $1; sub(/:$/, "", f) }
        f ~ /^[0-9]+\*?$/ { nl++; hl++ }
        f == "#####" || f == "=====" { nl++ }
        END { printf "%s %d %d %d %d\n", src, hl, nl, hb, nb }
    ' "$out/$(basename "$src").gcov"
done | awk '
    { printf "%-30s %6d/%-6d %3.0f%% %7d/%-6d %3.0f%%\n", $1, $2, $3, $3 ? 100 * $2 / $3 : 100,
             $4, $5, $5 ? 100 * $4 / $5 : 100
      hl += $2; nl += $3; hb += $4; nb += $5 }
    END { printf "%-30s %6d/%-6d %5.1f%% %7d/%-6d %5.1f%%\n", "total", hl, nl, nl ? 100 * hl / nl : 0,
                 hb, nb, nb ? 100 * hb / nb : 0 }'
echo "annotated sources: $out/ (##### marks lines never run)"
