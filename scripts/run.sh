#!/usr/bin/env bash
# make run: backend and gateway in the foreground with the example config.
# Prints a ready-to-paste curl line with a fresh sandbox key and the line
# that reloads the gateway's config; Ctrl-C stops both and exits 0.
# GATEWAY_CONFIG and BACKEND_CONFIG name config files of one's own (the
# examples under config/examples/ otherwise).
# GATEWAY_REDIS_URL=redis://... limits in Redis; the backend then publishes
# revocations on the same Redis (BACKEND_REDIS_URL), so they are immediate.
#
# Every address it passes on or prints is derived from the listen addresses
# it was given (GATEWAY_LISTEN, GATEWAY_ADMIN_LISTEN, BACKEND_LISTEN,
# BACKEND_ADMIN_LISTEN, or the config files): the gateway's backend URL, the
# public base URL, vendorctl's URLs. It refuses to start when one of those
# ports already answers or when another make run holds the same database, and
# it exits non-zero when one of its processes stops on its own.
#
# With GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE (or a tls: block in the
# gateway's config) the gateway serves HTTPS: the public base URL and the
# printed curl lines are https://, with that certificate file as --cacert.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN_DIR=${BIN_DIR:-bin}
BACKEND_CONFIG=${BACKEND_CONFIG:-config/examples/backend.yaml}
GATEWAY_CONFIG=${GATEWAY_CONFIG:-config/examples/gateway.yaml}

# setting FILE KEY: a top-level scalar of a config file, unquoted.
setting() { sed -n "s/^$2: *\"\{0,1\}\([^\"]*\)\"\{0,1\}.*/\1/p" "$1" | head -1; }
# nested FILE BLOCK KEY: a scalar directly under a top-level block, unquoted.
nested() {
	awk -v block="$2:" -v key="$3:" '
		/^[^ #]/ { in_block = ($1 == block) }
		in_block && $1 == key { v = $2; gsub(/"/, "", v); print v; exit }' "$1"
}
# dial_host ADDR: the host to connect to for a listen address (":8080" and
# "0.0.0.0:8080" listen on every address; loopback answers for them).
dial_host() {
	local h=${1%:*}
	case "$h" in "" | 0.0.0.0 | "[::]") echo 127.0.0.1 ;; *) echo "$h" ;; esac
}
# show_host ADDR: the host to print in a URL for a listen address.
show_host() {
	local h=${1%:*}
	case "$h" in "" | 0.0.0.0 | "[::]" | 127.0.0.1 | "[::1]") echo localhost ;; *) echo "$h" ;; esac
}
port_of() { echo "${1##*:}"; }
# answers ADDR: something accepts connections on the listen address.
answers() {
	local h
	h=$(dial_host "$1")
	h=${h#[}
	h=${h%]}
	(exec 3<>"/dev/tcp/$h/$(port_of "$1")") 2>/dev/null
}
# http_ok ADDR PATH: a GET of PATH on the listen address answers 200.
http_ok() {
	local h line
	h=$(dial_host "$1")
	h=${h#[}
	h=${h%]}
	(
		exec 3<>"/dev/tcp/$h/$(port_of "$1")" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$h" >&3
		read -r -t 2 line <&3 || exit 1
		[[ $line == "HTTP/1."?" 200 "* ]]
	) 2>/dev/null
}

backend_listen=${BACKEND_LISTEN:-$(setting "$BACKEND_CONFIG" listen)}
backend_admin=${BACKEND_ADMIN_LISTEN:-$(setting "$BACKEND_CONFIG" admin_listen)}
gateway_listen=${GATEWAY_LISTEN:-$(setting "$GATEWAY_CONFIG" listen)}
gateway_admin=${GATEWAY_ADMIN_LISTEN:-$(setting "$GATEWAY_CONFIG" admin_listen)}
database=${BACKEND_DATABASE:-$(setting "$BACKEND_CONFIG" database)}

# HTTPS when the gateway has a certificate (files or ACME): the curl lines
# then trust the certificate file (its chain ends with the CA that signed it,
# or it is self-signed); an ACME certificate is trusted by the system roots.
tls_cert=${GATEWAY_TLS_CERT_FILE:-$(nested "$GATEWAY_CONFIG" tls cert_file)}
tls_acme=${GATEWAY_TLS_ACME_DOMAINS:-}
scheme=http
curl_tls=""
if [ -n "$tls_cert" ]; then
	scheme=https
	curl_tls="--cacert $tls_cert "
elif [ -n "$tls_acme" ] || grep -q '^  acme:' "$GATEWAY_CONFIG"; then
	scheme=https
fi
public="$scheme://$(show_host "$gateway_listen"):$(port_of "$gateway_listen")"
export GATEWAY_BACKEND_URL=${GATEWAY_BACKEND_URL:-http://$(dial_host "$backend_listen"):$(port_of "$backend_listen")}
export GATEWAY_PUBLIC_BASE_URL=${GATEWAY_PUBLIC_BASE_URL:-${BACKEND_PUBLIC_BASE_URL:-$public}}
export BACKEND_PUBLIC_BASE_URL=${BACKEND_PUBLIC_BASE_URL:-$GATEWAY_PUBLIC_BASE_URL}
public=$GATEWAY_PUBLIC_BASE_URL

if [ -n "${GATEWAY_REDIS_URL:-}" ]; then
	export BACKEND_REDIS_URL=${BACKEND_REDIS_URL:-$GATEWAY_REDIS_URL}
	if [ -n "${GATEWAY_REDIS_MASTER_NAME:-}" ]; then
		export BACKEND_REDIS_MASTER_NAME=${BACKEND_REDIS_MASTER_NAME:-$GATEWAY_REDIS_MASTER_NAME}
	fi
fi
backend_admin_url="http://$(dial_host "$backend_admin"):$(port_of "$backend_admin")"
gateway_admin_url="http://$(dial_host "$gateway_admin"):$(port_of "$gateway_admin")"
export VENDORCTL_ADMIN_URL=${VENDORCTL_ADMIN_URL:-$backend_admin_url}
export VENDORCTL_ADMIN_TOKEN=${VENDORCTL_ADMIN_TOKEN:-${BACKEND_ADMIN_TOKEN:-$(setting "$BACKEND_CONFIG" admin_token)}}
export VENDORCTL_GATEWAY_ADMIN_URL=${VENDORCTL_GATEWAY_ADMIN_URL:-$gateway_admin_url}
export VENDORCTL_GATEWAY_ADMIN_TOKEN=${VENDORCTL_GATEWAY_ADMIN_TOKEN:-${GATEWAY_ADMIN_TOKEN:-$(setting "$GATEWAY_CONFIG" admin_token)}}

# Another process on one of the ports would answer in our place: the
# banner would then describe a stack this run did not start.
for pair in "gateway listen:GATEWAY_LISTEN:$gateway_listen" "gateway admin_listen:GATEWAY_ADMIN_LISTEN:$gateway_admin" \
	"backend listen:BACKEND_LISTEN:$backend_listen" "backend admin_listen:BACKEND_ADMIN_LISTEN:$backend_admin"; do
	what=${pair%%:*}
	rest=${pair#*:}
	var=${rest%%:*}
	addr=${rest#*:}
	if answers "$addr"; then
		echo "make run: port $(port_of "$addr") ($what, $addr) is in use by another process:" \
			"stop it (another make run?) or set $var to a free address" >&2
		exit 1
	fi
done

mkdir -p var "$(dirname "$database")"
# One stack a database: two backends on one SQLite file would both sweep
# and work the same orders.
exec 9>"$database.run-lock"
if ! flock -n 9; then
	echo "make run: the database $database is in use by another make run:" \
		"stop it, or set BACKEND_DATABASE to another file" >&2
	exit 1
fi

pids=()
names=()
cleanup() {
	local rc=$?
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "vendorgate stopped"
	exit "$rc"
}
trap cleanup EXIT
# Ctrl-C is a stop, not a failure: exit 0 (cleanup stops the processes).
trap 'exit 0' INT TERM

# start NAME ADMIN_LISTEN ARGS...: starts a binary and waits until its admin
# listener answers /healthz while the process is still alive (the ports
# were free, so the answer is its own).
start() {
	local name=$1 admin=$2
	shift 2
	# A session of its own: the terminal's Ctrl-C reaches this script alone,
	# which stops the processes itself. Had they received it too, one of
	# them could end before the trap ran and read as a crash.
	setsid "$BIN_DIR/$name" "$@" &
	pids+=($!)
	names+=("$name")
	local pid=$!
	for _ in $(seq 1 300); do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "make run: the $name did not start (its error is above)" >&2
			exit 1
		fi
		if http_ok "$admin" /healthz; then
			return 0
		fi
		sleep 0.1
	done
	echo "make run: the $name did not answer on its admin listener $admin within 30s" >&2
	exit 1
}

start backend "$backend_admin" -config "$BACKEND_CONFIG"
start gateway "$gateway_admin" -config "$GATEWAY_CONFIG"
gateway_pid=${pids[1]}

vendor=$("$BIN_DIR/vendorctl" vendor list | awk '/Sandbox Demo Vendor/ && /sandbox/ {print $1; exit}')
if [ -z "$vendor" ]; then
	echo "no seeded sandbox vendor found (is seed_sandbox_vendor on?)" >&2
	exit 1
fi
key=$("$BIN_DIR/vendorctl" -o json key issue "$vendor" | grep -o '"key": *"[^"]*"' | cut -d'"' -f4)
# A new Idempotency-Key each run: the same one would answer with the
# previous run's order (same key, same body: the same order).
idem="demo-$(date +%Y%m%d-%H%M%S)-$$"
if [ -n "${BACKEND_REDIS_URL:-}" ]; then
	revocation="at once (the backend publishes revocations on ${BACKEND_REDIS_URL%%,*})"
else
	revocation="within the gateway's key_cache.ttl, 30s (no Redis: set GATEWAY_REDIS_URL to make it immediate)"
fi
cat <<MSG

vendorgate is up: gateway on ${public} (proxying to ${GATEWAY_BACKEND_URL}), backend admin on ${VENDORCTL_ADMIN_URL}.
A sandbox key was issued for "Sandbox Demo Vendor" (shown once). Try:

  curl -s ${curl_tls}-H 'X-API-Key: ${key}' ${public}/api/vendor/v1/me

Place a sandbox order (license numbers ending 0002, 0003, 0004 are held for review):

  curl -s ${curl_tls}-H 'X-API-Key: ${key}' -H 'Content-Type: application/json' -H 'Idempotency-Key: ${idem}' \\
    -d '{"mc_number":"MC-123456","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":"D1234567","license_state":"TX"},"services":["mvr","psp","cdlis","driver_reviews"]}' \\
    ${public}/api/vendor/v1/orders

The API's documentation: ${public}/docs

Operate it with vendorctl from another shell. Its tokens are the admin_token settings of
${BACKEND_CONFIG} (the backend's) and ${GATEWAY_CONFIG} (the gateway's, for usage):

  export VENDORCTL_ADMIN_URL=${VENDORCTL_ADMIN_URL} VENDORCTL_ADMIN_TOKEN='${VENDORCTL_ADMIN_TOKEN}'
  export VENDORCTL_GATEWAY_ADMIN_URL=${VENDORCTL_GATEWAY_ADMIN_URL} VENDORCTL_GATEWAY_ADMIN_TOKEN='${VENDORCTL_GATEWAY_ADMIN_TOKEN}'
  ${BIN_DIR}/vendorctl order list --status under_review

A revoked key is refused ${revocation}.
After editing ${GATEWAY_CONFIG}, reload the gateway (limits, overrides, docs, certificates):

  kill -HUP ${gateway_pid}   # the gateway, re-reading ${GATEWAY_CONFIG}; it logs what changed

Ctrl-C stops both.
MSG

# A process that stops on its own takes the stack down with it, and the
# exit status says so.
set +e
wait -n "${pids[@]}"
rc=$?
set -e
for i in "${!pids[@]}"; do
	if ! kill -0 "${pids[$i]}" 2>/dev/null; then
		echo "make run: the ${names[$i]} stopped (exit status $rc); stopping the rest" >&2
	fi
done
[ "$rc" -ne 0 ] || rc=1
exit "$rc"
