#!/usr/bin/env bash
# usage: scripts/constant-rate.sh RPS SECONDS [TOLLGATE_DIR]
#
# One constant-rate run, to count spurious store failures: tollgate (its built dist/, from
# TOLLGATE_DIR or this checkout) with default settings on its own redis-server, and ghz sending
# RPS checks a second of three descriptors (tenant, tenant+route, a per-request address) for
# SECONDS, 50 in flight on 4 connections. Prints the calls, the achieved rate, p99 and the errors
# by message. ghz comes from PATH, or from .cache/ghz/ where `npm run bench` installs it. Every
# process it starts listens on 127.0.0.1 and is stopped at the end.
set -euo pipefail
rps=${1:?usage: scripts/constant-rate.sh RPS SECONDS [TOLLGATE_DIR]}
seconds=${2:?usage: scripts/constant-rate.sh RPS SECONDS [TOLLGATE_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
tollgate=$(cd "${3:-$root}" && pwd)
ghz=$(command -v ghz || echo "$root/.cache/ghz/v0.121.0/ghz")
[ -x "$ghz" ] || { echo "constant-rate: no ghz: run npm run bench once, or put ghz on PATH" >&2; exit 2; }
[ -f "$tollgate/dist/main.js" ] || { echo "constant-rate: $tollgate/dist/main.js is not built" >&2; exit 2; }

free_port() { node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
work=$(mktemp -d)
redis_port=$(free_port)
grpc_port=$(free_port)
http_port=$(free_port)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
cat >"$work/rules.yaml" <<'YAML'
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
YAML
(cd "$tollgate" && CONFIG_PATH="$work/rules.yaml" REDIS_URL="redis://127.0.0.1:$redis_port" \
  GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port" HOST=127.0.0.1 PORT="$http_port" LOG_LEVEL=silent \
  exec node dist/main.js) &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$http_port/healthcheck" >/dev/null 2>&1 && break
  sleep 0.1
done

data='{"domain":"bench","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]},{"entries":[{"key":"tenant","value":"acme"},{"key":"route","value":"/orders"}]},{"entries":[{"key":"remote_address","value":"10.0.0.{{.RequestNumber}}"}]}]}'
"$ghz" --insecure --proto="$root/proto/envoy/service/ratelimit/v3/rls.proto" --import-paths="$root/proto" \
  --call=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit --data="$data" \
  --concurrency=50 --connections=4 --rps="$rps" --async --duration="${seconds}s" --duration-stop=wait \
  --timeout=5s --format=json --output="$work/report.json" "127.0.0.1:$grpc_port" >/dev/null 2>&1 || true
node -e '
  const r = require(process.argv[1]);
  const p99 = r.latencyDistribution?.find((x) => x.percentage === 99)?.latency / 1e6;
  console.log(JSON.stringify({ calls: r.count, rps: Math.round(r.rps), p99Ms: Number(p99.toFixed(2)), errors: r.errorDistribution ?? {} }));
' "$work/report.json"
