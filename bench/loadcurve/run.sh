#!/usr/bin/env bash
# The load-time curve: `reconfd check-config` on the example configuration
# with N model aliases (15 to 16 bytes each), several runs per N. Prints
# one line per run: N, file bytes, wall seconds, CPU seconds (user+sys: on
# a shared machine the wall time is mostly waiting for a core). The aim (issue 13): linear,
# 90k at most 18x the time of 10k and under 5 s; 130k (2 MiB, the size
# bound) well inside the one-minute attempt timeout.
#
#   bench/loadcurve/run.sh [RUNS] [N...]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 30000 60000 90000 130000)
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
    /usr/bin/time -f "$n\t$bytes\t%e\t%U %S" -o "$dir/t" "$dir/reconfd" check-config --config "$f" > /dev/null
    awk -F'\t' '{ split($4, c, " "); printf "%s\t%s\t%s\t%.2f\n", $1, $2, $3, c[1] + c[2] }' "$dir/t"
  done
done
