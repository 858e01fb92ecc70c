#!/usr/bin/env bash
# Try ACME locally: Pebble (a test ACME CA) issues the gateway a
# certificate for gateway.test, which pebble-challtestsrv, as Pebble's DNS,
# resolves to 127.0.0.1. It starts pebble-challtestsrv, Pebble and the
# gateway (bin/gateway, `make build`), waits for the certificate, fetches
# Pebble's root and prints the curl line that trusts it. Ctrl-C stops all
# three; --once stops them after the first request answered and exits 0.
#
# Needs pebble and pebble-challtestsrv on PATH (Debian/Ubuntu: the pebble
# package ships both), openssl and curl; it installs nothing. Everything
# it writes goes to TRY_ACME_DIR (a new temporary directory otherwise,
# removed at the end). The addresses, all on loopback, can be moved:
#   GATEWAY_LISTEN        the gateway's HTTPS listener (127.0.0.1:8443);
#                         Pebble validates TLS-ALPN-01 on its port
#   GATEWAY_ADMIN_LISTEN  its admin listener (127.0.0.1:9443)
#   PEBBLE_LISTEN         Pebble's ACME directory (127.0.0.1:14000)
#   PEBBLE_MGMT_LISTEN    Pebble's management port, serving its root (127.0.0.1:15000)
#   CHALLTESTSRV_DNS      pebble-challtestsrv's DNS server (127.0.0.1:8053)
#   CHALLTESTSRV_MGMT     pebble-challtestsrv's management port (127.0.0.1:8055)
# The gateway runs with config/examples/gateway.yaml (GATEWAY_CONFIG for
# another); its backend need not run for /docs and /openapi.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

once=false
case "${1:-}" in
--once) once=true ;;
"") ;;
*)
	echo "usage: $0 [--once]" >&2
	exit 2
	;;
esac

BIN_DIR=${BIN_DIR:-bin}
GATEWAY_CONFIG=${GATEWAY_CONFIG:-config/examples/gateway.yaml}
DOMAIN=gateway.test
GATEWAY_LISTEN=${GATEWAY_LISTEN:-127.0.0.1:8443}
GATEWAY_ADMIN_LISTEN=${GATEWAY_ADMIN_LISTEN:-127.0.0.1:9443}
PEBBLE_LISTEN=${PEBBLE_LISTEN:-127.0.0.1:14000}
PEBBLE_MGMT_LISTEN=${PEBBLE_MGMT_LISTEN:-127.0.0.1:15000}
CHALLTESTSRV_DNS=${CHALLTESTSRV_DNS:-127.0.0.1:8053}
CHALLTESTSRV_MGMT=${CHALLTESTSRV_MGMT:-127.0.0.1:8055}

for bin in pebble pebble-challtestsrv openssl curl; do
	if ! command -v "$bin" >/dev/null; then
		echo "try-acme: $bin is not on PATH (pebble and pebble-challtestsrv: the pebble package)" >&2
		exit 1
	fi
done
if [ ! -x "$BIN_DIR/gateway" ]; then
	echo "try-acme: no $BIN_DIR/gateway: run make build first" >&2
	exit 1
fi

# answers ADDR: something accepts connections on ADDR (host:port).
answers() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
for addr in "$GATEWAY_LISTEN" "$GATEWAY_ADMIN_LISTEN" "$PEBBLE_LISTEN" "$PEBBLE_MGMT_LISTEN" "$CHALLTESTSRV_MGMT"; do
	if answers "$addr"; then
		echo "try-acme: $addr already answers: stop what listens there or move it (see the top of $0)" >&2
		exit 1
	fi
done

if [ -n "${TRY_ACME_DIR:-}" ]; then
	dir=$TRY_ACME_DIR
	mkdir -p "$dir"
	keep=true
else
	dir=$(mktemp -d)
	keep=false
fi
pids=()
stop_all() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	pids=()
	$keep || rm -rf "$dir"
}
trap stop_all EXIT
trap 'exit 0' INT TERM

# wait_for ADDR NAME LOG: ADDR answers within 30 s, or NAME's log is shown.
wait_for() {
	local i
	for i in $(seq 300); do
		answers "$1" && return 0
		sleep 0.1
	done
	echo "try-acme: $2 does not answer on $1 after 30 s; its log:" >&2
	cat "$3" >&2
	exit 1
}

# Pebble's own HTTPS listener needs a certificate; the gateway trusts it
# to reach the ACME directory (tls.acme.ca_root_file).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj "/CN=pebble listener" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
	-keyout "$dir/pebble-listener.key" -out "$dir/pebble-listener.pem" 2>"$dir/openssl.log"

# pebble-challtestsrv answers every name with 127.0.0.1 (no AAAA): the
# gateway.test Pebble validates is this gateway. Its own challenge
# servers are off; the gateway answers the challenges.
pebble-challtestsrv -defaultIPv4 127.0.0.1 -defaultIPv6 "" -dns01 "$CHALLTESTSRV_DNS" \
	-management "$CHALLTESTSRV_MGMT" -http01 "" -https01 "" -tlsalpn01 "" \
	>"$dir/challtestsrv.log" 2>&1 &
pids+=($!)
wait_for "$CHALLTESTSRV_MGMT" pebble-challtestsrv "$dir/challtestsrv.log"

# Pebble validates TLS-ALPN-01 on the gateway's port (tlsPort) and
# HTTP-01 on port 1, where nothing listens (the gateway has no
# http_listen here).
cat >"$dir/pebble.json" <<EOF
{"pebble": {
  "listenAddress": "$PEBBLE_LISTEN",
  "managementListenAddress": "$PEBBLE_MGMT_LISTEN",
  "certificate": "$dir/pebble-listener.pem",
  "privateKey": "$dir/pebble-listener.key",
  "httpPort": 1,
  "tlsPort": ${GATEWAY_LISTEN##*:},
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false
}}
EOF
# PEBBLE_VA_NOSLEEP: validate at once; PEBBLE_WFE_NONCEREJECT=0: no nonces
# refused at random (Pebble's default 5 % tests a client's retries).
PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 pebble -config "$dir/pebble.json" -dnsserver "$CHALLTESTSRV_DNS" \
	>"$dir/pebble.log" 2>&1 &
pids+=($!)
wait_for "$PEBBLE_LISTEN" pebble "$dir/pebble.log"
wait_for "$PEBBLE_MGMT_LISTEN" "pebble's management port" "$dir/pebble.log"

# The gateway's environment is the example config's, with ACME from
# Pebble; a caller's own GATEWAY_ variables are not passed on.
env -u GATEWAY_TLS_CERT_FILE -u GATEWAY_TLS_KEY_FILE -u GATEWAY_HTTP_LISTEN -u GATEWAY_PUBLIC_BASE_URL \
	GATEWAY_LISTEN="$GATEWAY_LISTEN" GATEWAY_ADMIN_LISTEN="$GATEWAY_ADMIN_LISTEN" \
	GATEWAY_PUBLIC_BASE_URL="https://$DOMAIN:${GATEWAY_LISTEN##*:}" \
	GATEWAY_TLS_ACME_DOMAINS="$DOMAIN" \
	GATEWAY_TLS_ACME_CA="https://$PEBBLE_LISTEN/dir" \
	GATEWAY_TLS_ACME_CA_ROOT_FILE="$dir/pebble-listener.pem" \
	GATEWAY_TLS_ACME_STORAGE="$dir/acme" \
	"$BIN_DIR/gateway" -config "$GATEWAY_CONFIG" >"$dir/gateway.log" 2>&1 &
pids+=($!)
wait_for "$GATEWAY_LISTEN" gateway "$dir/gateway.log"

# Pebble's root signs what it issues (a new one at each Pebble start).
curl -sS --fail --cacert "$dir/pebble-listener.pem" -o "$dir/pebble-root.pem" "https://$PEBBLE_MGMT_LISTEN/roots/0"

url="https://$DOMAIN:${GATEWAY_LISTEN##*:}/docs"
resolve="$DOMAIN:${GATEWAY_LISTEN##*:}:${GATEWAY_LISTEN%:*}"
ok=false
for i in $(seq 300); do
	if curl -sS --fail -o /dev/null --cacert "$dir/pebble-root.pem" --resolve "$resolve" "$url" 2>/dev/null; then
		ok=true
		break
	fi
	sleep 0.2
done
if ! $ok; then
	echo "try-acme: no certificate from Pebble after 60 s; the gateway's log:" >&2
	tail -20 "$dir/gateway.log" >&2
	echo "pebble's log:" >&2
	tail -20 "$dir/pebble.log" >&2
	exit 1
fi

echo "try-acme: the gateway serves a certificate for $DOMAIN from Pebble; try:"
echo "  curl --cacert $dir/pebble-root.pem --resolve $resolve $url"
if $once; then
	exit 0
fi
echo "Ctrl-C stops pebble-challtestsrv, Pebble and the gateway."
wait -n "${pids[@]}" || true
echo "try-acme: a process stopped on its own; logs under $dir" >&2
keep=true
exit 1
