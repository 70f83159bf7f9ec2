#!/usr/bin/env bash
# perf_table_ok.sh FILE RANKS SIZES
# Checks the output of a weft-perf collective run (its table, in FILE): one job of RANKS
# ranks, SIZES sizes measured, none with wrong results (columns: size count type op time
# algbw busbw #wrong sets). Exits 0 when it holds, 1 saying what does not.
set -euo pipefail
file=$1 ranks=$2 sizes=$3
grep -q "^# weft-perf [a-z_]*: $ranks ranks" "$file" ||
    { echo "FAIL: not one job of $ranks ranks"; exit 1; }
rows=$(awk '$1 ~ /^[0-9]+$/' "$file" | wc -l)
wrong=$(awk '$1 ~ /^[0-9]+$/ && $8 != 0' "$file" | wc -l)
[[ $rows -eq $sizes ]] || { echo "FAIL: $rows sizes measured, $sizes expected"; exit 1; }
[[ $wrong -eq 0 ]] || { echo "FAIL: $wrong sizes with wrong results"; exit 1; }
