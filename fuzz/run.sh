#!/bin/sh
# Runs one fuzz target for SECONDS (default 600) over its working corpus (fuzz/corpus-raw/TARGET,
# seeded from the kept one), logging to fuzz/logs/TARGET.log. From the repository root:
#   fuzz/run.sh TARGET [SECONDS]
# Afterwards keep a minimised corpus: fuzz/cmin.sh TARGET (docs/fuzzing.md).
set -eu
target=$1
secs=${2:-600}
case $target in
  request_head|chunked|response_head) dict=http ;;
  path_route) dict=path ;;
  config) dict=config ;;
  *) dict= ;;
esac
mkdir -p fuzz/logs "fuzz/corpus-raw/$target"
cp -n "fuzz/corpus/$target"/* "fuzz/corpus-raw/$target/" 2>/dev/null || true
set -- -max_total_time="$secs" -timeout=10 -print_final_stats=1
if [ -n "$dict" ]; then set -- "$@" -dict="fuzz/dicts/$dict.dict"; fi
exec cargo +nightly fuzz run -O --debug-assertions "$target" "fuzz/corpus-raw/$target" -- "$@" \
  > "fuzz/logs/$target.log" 2>&1
