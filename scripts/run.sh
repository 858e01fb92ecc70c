#!/usr/bin/env bash
# make run: backend and gateway in the foreground with the example config.
# Prints a ready-to-paste curl line with a fresh sandbox key; Ctrl-C stops both.
# GATEWAY_REDIS_URL=redis://... limits in Redis; the backend then publishes
# revocations on the same Redis (BACKEND_REDIS_URL), so they are immediate.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN_DIR=${BIN_DIR:-bin}
BACKEND_CONFIG=${BACKEND_CONFIG:-config/examples/backend.yaml}
GATEWAY_CONFIG=${GATEWAY_CONFIG:-config/examples/gateway.yaml}

# setting FILE KEY: a top-level scalar of a config file, unquoted.
setting() { sed -n "s/^$2: *\"\{0,1\}\([^\"]*\)\"\{0,1\}.*/\1/p" "$1" | head -1; }

if [ -n "${GATEWAY_REDIS_URL:-}" ]; then
	export BACKEND_REDIS_URL=${BACKEND_REDIS_URL:-$GATEWAY_REDIS_URL}
	if [ -n "${GATEWAY_REDIS_MASTER_NAME:-}" ]; then
		export BACKEND_REDIS_MASTER_NAME=${BACKEND_REDIS_MASTER_NAME:-$GATEWAY_REDIS_MASTER_NAME}
	fi
fi
export VENDORCTL_ADMIN_URL=${VENDORCTL_ADMIN_URL:-http://${BACKEND_ADMIN_LISTEN:-$(setting "$BACKEND_CONFIG" admin_listen)}}
export VENDORCTL_ADMIN_TOKEN=${VENDORCTL_ADMIN_TOKEN:-${BACKEND_ADMIN_TOKEN:-$(setting "$BACKEND_CONFIG" admin_token)}}
export VENDORCTL_GATEWAY_ADMIN_URL=${VENDORCTL_GATEWAY_ADMIN_URL:-http://${GATEWAY_ADMIN_LISTEN:-$(setting "$GATEWAY_CONFIG" admin_listen)}}
export VENDORCTL_GATEWAY_ADMIN_TOKEN=${VENDORCTL_GATEWAY_ADMIN_TOKEN:-${GATEWAY_ADMIN_TOKEN:-$(setting "$GATEWAY_CONFIG" admin_token)}}
mkdir -p var

pids=()
stop() {
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "vendorgate stopped"
}
trap stop INT TERM EXIT

"$BIN_DIR/backend" -config "$BACKEND_CONFIG" &
pids+=($!)
for _ in $(seq 1 100); do
	"$BIN_DIR/vendorctl" vendor list >/dev/null 2>&1 && break
	kill -0 "${pids[0]}" 2>/dev/null || { echo "backend did not start" >&2; exit 1; }
	sleep 0.1
done

"$BIN_DIR/gateway" -config "$GATEWAY_CONFIG" &
pids+=($!)

vendor=$("$BIN_DIR/vendorctl" vendor list | awk '/Sandbox Demo Vendor/ && /sandbox/ {print $1; exit}')
if [ -z "$vendor" ]; then
	echo "no seeded sandbox vendor found (is seed_sandbox_vendor on?)" >&2
	exit 1
fi
key=$("$BIN_DIR/vendorctl" -o json key issue "$vendor" | grep -o '"key": *"[^"]*"' | cut -d'"' -f4)
listen=${GATEWAY_LISTEN:-$(setting "$GATEWAY_CONFIG" listen)}
port=${listen##*:}
# A new Idempotency-Key each run: the same one would answer with the
# previous run's order (same key, same body: the same order).
idem="demo-$(date +%Y%m%d-%H%M%S)-$$"
if [ -n "${BACKEND_REDIS_URL:-}" ]; then
	revocation="at once (the backend publishes revocations on ${BACKEND_REDIS_URL%%,*})"
else
	revocation="within the gateway's key_cache.ttl, 30s (no Redis: set GATEWAY_REDIS_URL to make it immediate)"
fi
cat <<MSG

vendorgate is up: gateway on :${port}, backend admin on ${VENDORCTL_ADMIN_URL}.
A sandbox key was issued for "Sandbox Demo Vendor" (shown once). Try:

  curl -s -H 'X-API-Key: ${key}' http://localhost:${port}/api/vendor/v1/me

Place a sandbox order (license numbers ending 0002, 0003, 0004 are held for review):

  curl -s -H 'X-API-Key: ${key}' -H 'Content-Type: application/json' -H 'Idempotency-Key: ${idem}' \\
    -d '{"mc_number":"MC-123456","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":"D1234567","license_state":"TX"},"services":["mvr","psp","cdlis","driver_reviews"]}' \\
    http://localhost:${port}/api/vendor/v1/orders

Operate it with vendorctl from another shell. Its tokens are the admin_token settings of
${BACKEND_CONFIG} (the backend's) and ${GATEWAY_CONFIG} (the gateway's, for usage):

  export VENDORCTL_ADMIN_URL=${VENDORCTL_ADMIN_URL} VENDORCTL_ADMIN_TOKEN='${VENDORCTL_ADMIN_TOKEN}'
  export VENDORCTL_GATEWAY_ADMIN_URL=${VENDORCTL_GATEWAY_ADMIN_URL} VENDORCTL_GATEWAY_ADMIN_TOKEN='${VENDORCTL_GATEWAY_ADMIN_TOKEN}'
  ${BIN_DIR}/vendorctl order list --status under_review

A revoked key is refused ${revocation}.
Ctrl-C stops both.
MSG
wait -n "${pids[@]}" || true
