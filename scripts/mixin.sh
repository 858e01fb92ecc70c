#!/usr/bin/env bash
# The monitoring mixin: writes vendorgate's alert rules and Grafana
# dashboards for the Prometheus job names of a settings file
# (deploy/prometheus/mixin.yml by default), as plain YAML and JSON.
#
#   scripts/mixin.sh [-s SETTINGS] OUTDIR
#
# OUTDIR gets alerts.yml and dashboards/vendorgate.json and
# dashboards/vendorgate-limiter.json. The sources are the shipped files,
# which select the default jobs; every selector of those jobs is rewritten,
# nothing else changes. The dashboards read their datasource from their
# datasource variable. It refuses a job name outside letters, digits and
# _ : / - (the dashboards match the jobs by regular expression).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

settings=$root/deploy/prometheus/mixin.yml
if [ "${1:-}" = "-s" ]; then
	settings=${2:?-s needs a settings file}
	shift 2
fi
if [ $# -ne 1 ]; then
	echo "usage: $0 [-s SETTINGS] OUTDIR" >&2
	exit 2
fi
out=$1

# setting KEY: a top-level scalar of the settings file, unquoted.
setting() {
	sed -n "s/^$1:[[:space:]]*[\"']\{0,1\}\([^\"'#]*[^\"'#[:space:]]\)[\"']\{0,1\}[[:space:]]*\(#.*\)\{0,1\}$/\1/p" "$settings" | tail -1
}
gateway_job=$(setting gateway_job)
backend_job=$(setting backend_job)
for pair in "gateway_job=$gateway_job" "backend_job=$backend_job"; do
	value=${pair#*=}
	if ! [[ "$value" =~ ^[A-Za-z0-9_:/-]+$ ]]; then
		echo "mixin: $settings: ${pair%%=*} \"$value\": want letters, digits and _ : / -" >&2
		exit 1
	fi
done
if [ "$gateway_job" = "$backend_job" ]; then
	echo "mixin: $settings: gateway_job and backend_job are both \"$gateway_job\": the alerts tell them apart by job" >&2
	exit 1
fi

mkdir -p "$out/dashboards"
# Through placeholders, so that a new name equal to the other default is
# not rewritten twice.
sed -e 's#job="vendorgate-gateway"#job="@GATEWAY_JOB@"#g' -e 's#job="vendorgate-backend"#job="@BACKEND_JOB@"#g' \
	-e "s#@GATEWAY_JOB@#$gateway_job#g" -e "s#@BACKEND_JOB@#$backend_job#g" \
	"$root/deploy/prometheus/alerts.yml" >"$out/alerts.yml"
for f in vendorgate.json vendorgate-limiter.json; do
	sed -e 's#job=~\\"vendorgate-gateway|vendorgate-backend\\"#job=~\\"@GATEWAY_JOB@|@BACKEND_JOB@\\"#g' \
		-e "s#@GATEWAY_JOB@#$gateway_job#g" -e "s#@BACKEND_JOB@#$backend_job#g" \
		"$root/deploy/grafana/dashboards/$f" >"$out/dashboards/$f"
done
echo "mixin: $out/alerts.yml and $out/dashboards/ for jobs $gateway_job and $backend_job"
