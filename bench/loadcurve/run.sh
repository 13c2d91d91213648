#!/usr/bin/env bash
# The load-time curve: `reconfd check-config` on the example configuration
# with N model aliases (15 to 16 bytes each), several runs per N. Prints
# one line per run: N, file bytes, seconds. The aim (issue 13): linear,
# 90k at most 18x the time of 10k and under 5 s; 139k (2 MiB, the size
# bound) well inside the one-minute attempt timeout.
#
#   bench/loadcurve/run.sh [RUNS] [N...]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 30000 60000 90000 139000)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/reconfd" ./cmd/reconfd
for n in "${sizes[@]}"; do
  f="$dir/aliases-$n.yaml"
  sed '/^model_aliases:/,$d' examples/local-stub.yaml > "$f"
  echo "model_aliases:" >> "$f"
  awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "  m%06d: stub\n", i }' >> "$f"
  bytes=$(stat -c %s "$f")
  for r in $(seq "$runs"); do
    start=$(date +%s.%N)
    "$dir/reconfd" check-config --config "$f" > /dev/null
    end=$(date +%s.%N)
    printf '%d\t%d\t%.3f\n' "$n" "$bytes" "$(echo "$end - $start" | bc)"
  done
done
