#!/usr/bin/env bash
# Whether two `spillway sim` builds give byte-identical JSON for every shipped scenario (the
# fleets at 5 simulated seconds, to bound the time): the check every change to the engine's
# speed must pass, since a speed change may not change a result. Exit 0 when all are
# identical, 1 (naming the scenarios) when not.
#
#   bench/sim/json-identity.sh BIN_A BIN_B [OUTDIR]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [OUTDIR]" >&2; exit 2; }
a=$1 b=$2 out=${3:-$(mktemp -d)}
mkdir -p "$out"
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }; done
short="fleet fleet-million-clients"
all=$("$a" sim --list 2>/dev/null | awk '{print $1}' || true)
[ -n "$all" ] || all="retry-amplification local-overload datacenter-overload metastable customer-quotas criticality-spike demo mmc fleet fleet-million-clients"
differ=""
for name in $all; do
  args=(sim "$name")
  case " $short " in *" $name "*) args+=(--duration 5s) ;; esac
  for side in a b; do
    bin=$a; [ "$side" = b ] && bin=$b
    "$bin" "${args[@]}" --json "$out/$name.$side.json" >/dev/null 2>&1 || { echo "$name: $bin failed" >&2; exit 1; }
  done
  if cmp -s "$out/$name.a.json" "$out/$name.b.json"; then echo "same   $name"; else echo "DIFFER $name"; differ="$differ $name"; fi
done
[ -z "$differ" ] || { echo "differ:$differ (files in $out)" >&2; exit 1; }
