#!/usr/bin/env bash
# make run: backend and gateway in the foreground with the example config.
# Prints a ready-to-paste curl line with a fresh sandbox key; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

BACKEND_CONFIG=${BACKEND_CONFIG:-config/examples/backend.yaml}
GATEWAY_CONFIG=${GATEWAY_CONFIG:-config/examples/gateway.yaml}
export VENDORCTL_ADMIN_URL=${VENDORCTL_ADMIN_URL:-http://${BACKEND_ADMIN_LISTEN:-127.0.0.1:8082}}
export VENDORCTL_ADMIN_TOKEN=${VENDORCTL_ADMIN_TOKEN:-${BACKEND_ADMIN_TOKEN:-dev-admin-token-change-me}}
mkdir -p var

pids=()
stop() {
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "vendorgate stopped"
}
trap stop INT TERM EXIT

bin/backend -config "$BACKEND_CONFIG" &
pids+=($!)
for _ in $(seq 1 100); do
	bin/vendorctl vendor list >/dev/null 2>&1 && break
	kill -0 "${pids[0]}" 2>/dev/null || { echo "backend did not start" >&2; exit 1; }
	sleep 0.1
done

bin/gateway -config "$GATEWAY_CONFIG" &
pids+=($!)

vendor=$(bin/vendorctl vendor list | awk '/Sandbox Demo Vendor/ && /sandbox/ {print $1; exit}')
if [ -z "$vendor" ]; then
	echo "no seeded sandbox vendor found (is seed_sandbox_vendor on?)" >&2
	exit 1
fi
key=$(bin/vendorctl -o json key issue "$vendor" | grep -o '"key": *"[^"]*"' | cut -d'"' -f4)
listen=${GATEWAY_LISTEN:-$(sed -n 's/^listen: *"\{0,1\}\([^" ]*\)"\{0,1\}.*/\1/p' "$GATEWAY_CONFIG" | head -1)}
port=${listen##*:}
cat <<MSG

vendorgate is up: gateway on :${port}, backend admin on ${VENDORCTL_ADMIN_URL}.
A sandbox key was issued for "Sandbox Demo Vendor" (shown once). Try:

  curl -s -H 'X-API-Key: ${key}' http://localhost:${port}/api/vendor/v1/me

Place a sandbox order:

  curl -s -H 'X-API-Key: ${key}' -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \\
    -d '{"mc_number":"MC-123456","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":"D1234567","license_state":"TX"},"services":["mvr","psp","cdlis","driver_reviews"]}' \\
    http://localhost:${port}/api/vendor/v1/orders

Ctrl-C stops both.
MSG
wait -n "${pids[@]}" || true
