#!/usr/bin/env bash
# End to end through a real Envoy: brings up docker-compose.yml, drives it with curl, checks the
# 429s and the headers, and tears it down. It needs a Docker engine with the compose plugin, so
# it is not part of `npm test` (these CI machines have no engine).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! docker compose version >/dev/null 2>&1; then
  echo "e2e:compose needs Docker with the compose plugin (docker compose)." >&2
  exit 1
fi

docker compose up --build --wait
trap 'docker compose down --volumes' EXIT

envoy=http://localhost:10000
failures=0
check() { # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected $2, got $3"; failures=$((failures + 1)); fi
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
header() { # header NAME CURL_ARGS...: the value of one response header
  local name=$1
  shift
  curl -s -D - -o /dev/null "$@" | tr -d '\r' | awk -v h="$(echo "$name" | tr 'A-Z' 'a-z')" \
    'BEGIN { FS = ": " } tolower($1) == h { print $2 }'
}

# /orders: 5 a minute per tenant (sliding window). The 6th is turned away by Envoy.
check "allowed request" 200 "$(status -H 'x-tenant-id: acme' $envoy/orders)"
check "RateLimit-Policy on an allowed request" '"tenant-orders";q=5;w=60' \
  "$(header RateLimit-Policy -H 'x-tenant-id: acme' $envoy/orders)"
for _ in 3 4 5; do status -H 'x-tenant-id: acme' $envoy/orders >/dev/null; done
check "6th /orders request" 429 "$(status -H 'x-tenant-id: acme' $envoy/orders)"
check "x-envoy-ratelimited on a 429" true "$(header x-envoy-ratelimited -H 'x-tenant-id: acme' $envoy/orders)"
retry=$(header Retry-After -H 'x-tenant-id: acme' $envoy/orders)
[[ "$retry" =~ ^[0-9]+$ ]] && check "Retry-After is whole seconds" yes yes || check "Retry-After" seconds "$retry"

# /reports/export: 2 every 30 s per tenant.
check "1st export" 200 "$(status -H 'x-tenant-id: globex' $envoy/reports/export/q3)"
check "2nd export" 200 "$(status -H 'x-tenant-id: globex' $envoy/reports/export/q3)"
check "3rd export" 429 "$(status -H 'x-tenant-id: globex' $envoy/reports/export/q3)"

# /search: a shadow-mode rule of 3 a minute is counted but never turns a request away.
for i in 1 2 3 4; do check "search $i (shadow rule)" 200 "$(status -H 'x-tenant-id: initech' $envoy/search)"; done

# Every route: 20 a minute per client address (fixed window), with or without a tenant.
seen=200
for _ in $(seq 1 25); do
  seen=$(status $envoy/anything)
  [ "$seen" = 429 ] && break
done
check "per-address limit reached within 20 a minute" 429 "$seen"

# tollgate's metrics show the denials.
over=$(curl -s http://localhost:8080/metrics | awk '/^ratelimit_service_rate_limit_over_limit\{/ { sum += $2 } END { print (sum > 0) ? "yes" : "no" }')
check "over_limit on /metrics" yes "$over"

[ "$failures" = 0 ] && echo "all checks passed" || { echo "$failures check(s) failed"; exit 1; }
