#!/usr/bin/env bash
# The deploy step of a pipeline: apply the configuration, then reload
# exactly it. The kubelet brings a ConfigMap change to the pod 60-120 s
# after the apply; `reload --expect` makes the reload wait for these very
# bytes (up to 3 minutes) instead of reloading the old ones as a no-op.
#
#   RECONF_MANAGEMENT_TOKEN=... deploy/kubernetes/pipeline.sh single|fleet
set -euo pipefail
cd "$(dirname "$0")"
variant=${1:-single}
kubectl apply -f namespace.yaml
kubectl -n reconf create configmap reconfd-config --from-file=config.yaml=config.yaml \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f "$variant/"
kubectl -n reconf rollout status deployment/reconfd --timeout 5m
kubectl -n reconf port-forward deployment/reconfd 9090:9090 >/dev/null &
forward=$!
trap 'kill "$forward"' EXIT
sleep 2
reconfd reload --address 127.0.0.1:9090 --expect config.yaml --wait 3m
