#!/bin/sh
# Replaces the kept corpus of TARGET (fuzz/corpus/TARGET, committed; run on stable by
# crates/spillway-proxy/tests/fuzz_corpus.rs) with the minimised working corpus
# (fuzz/corpus-raw/TARGET, what fuzz/run.sh grew): the fewest inputs that reach the same edges.
# Edges only (-use_counters=0): keeping every hit-count bucket too kept 3 to 5 times the files
# (config: 2,250 instead of 710) for the same code reached.
# From the repository root: fuzz/cmin.sh TARGET
set -eu
target=$1
rm -rf "fuzz/corpus/$target"
cp -r "fuzz/corpus-raw/$target" "fuzz/corpus/$target"
cargo +nightly fuzz cmin -O --debug-assertions "$target" "fuzz/corpus/$target" \
  -- -use_counters=0 > "fuzz/logs/$target.cmin.log" 2>&1
echo "$target: $(ls "fuzz/corpus/$target" | wc -l) files, $(cat "fuzz/corpus/$target"/* | wc -c) bytes"
