#!/bin/sh
# The figures docs/fuzzing.md records, from a run's log: executions, the last cov:/ft: line.
# fuzz/stats.sh TARGET
log=fuzz/logs/$1.log
grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -n 1
grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' "$log"
grep -E 'deadly signal|panicked|ERROR: libFuzzer|Test unit written' "$log" | head -5
