#!/bin/bash
# One `dsinfer serve` against `dsinfer cluster` 1P+1D and 2P+2D on the same load (bench-http chat, the
# same levels), then the UCX transport's own bandwidth (bench_handoff) in the same run. Prints bench-http's
# tables and the router's handoff counters; numbers only, never pass/fail.
#
#   bench/cluster/cluster_vs_serve.sh MODEL_DIR [BUILD_DIR]     (BUILD_DIR: build/release)
# Environment: UCX_TLS (default tcp), CONCURRENCY (default 1,4), DURATION (s, default 40), MAX_TOKENS (32).
set -eu
MODEL=${1:?usage: cluster_vs_serve.sh MODEL_DIR [BUILD_DIR]}
BUILD=${2:-build/release}
BIN=$BUILD/src/cli/dsinfer
export UCX_TLS=${UCX_TLS:-tcp} DSINFER_LOG=${DSINFER_LOG:-warn}
LOGS=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$LOGS"' EXIT

wait_for() {  # $1 log file, $2 pattern
  for _ in $(seq 1 900); do grep -q "$2" "$1" && return 0; sleep 1; done
  echo "not ready: $1"; cat "$1"; exit 1
}
load() {  # $1 port
  "$BIN" bench-http --url "http://127.0.0.1:$1" --model bench --concurrency "${CONCURRENCY:-1,4}" \
    --duration "${DURATION:-40}" --max-tokens "${MAX_TOKENS:-32}"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

PORT=$(free_port)
"$BIN" serve --model "$MODEL" --port "$PORT" --served-model-name bench > "$LOGS/serve.log" 2>&1 &
PID=$!
wait_for "$LOGS/serve.log" ready
echo "== serve"; load "$PORT"
kill -TERM $PID; wait $PID || true

for pd in "1 1" "2 2"; do
  set -- $pd
  PORT=$(free_port)
  "$BIN" cluster --model "$MODEL" --prefill "$1" --decode "$2" --port "$PORT" --served-model-name bench \
    > "$LOGS/cluster.log" 2>&1 &
  PID=$!
  wait_for "$LOGS/cluster.log" "dsinfer cluster: ready"
  echo "== cluster ${1}P+${2}D"; load "$PORT"
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^dsinfer_router_(handoff|failover|imbalance)'
  kill -TERM $PID; wait $PID || true
done

echo "== bench_handoff (UCX_TLS=$UCX_TLS): 8 MiB x 5, 4 MiB chunks"
"$BUILD/bench/bench_handoff" 8 5 4
