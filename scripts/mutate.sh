#!/usr/bin/env bash
# Mutation run: each planted defect under scripts/mutations/ is applied to
# a copy of this checkout (tracked files and local changes), and the test
# its patch names (a line "test: <go test arguments>") must fail. A
# mutation whose test passes survived: the suite misses that defect, and
# the run fails. A mutation that no longer applies or builds fails the run
# too (refresh its patch). `make mutations` runs it; MUTATIONS=name,...
# runs some only.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work"

go=${GO:-go}
only=",${MUTATIONS:-},"
caught=0 failed=0
for patch in scripts/mutations/*.patch; do
	name=$(basename "$patch" .patch)
	if [ "$only" != ",," ] && [[ "$only" != *",$name,"* ]]; then
		continue
	fi
	args=$(sed -n 's/^test: //p' "$patch" | head -1)
	if [ -z "$args" ]; then
		echo "$name: no \"test:\" line" >&2
		failed=$((failed + 1))
		continue
	fi
	if ! (cd "$work" && git apply "$root/$patch"); then
		echo "$name: does not apply" >&2
		failed=$((failed + 1))
		continue
	fi
	pkg=${args##* }
	start=$(date +%s)
	if ! (cd "$work" && $go vet "$pkg" >"$work/.out" 2>&1); then
		echo "$name: does not build:" >&2
		cat "$work/.out" >&2
		failed=$((failed + 1))
	else
		# shellcheck disable=SC2086 # the test's arguments, split as written
		if (cd "$work" && $go test -count=1 $args >"$work/.out" 2>&1); then
			echo "$name: SURVIVED (go test $args passed)"
			failed=$((failed + 1))
		else
			first=$( (grep -m1 -A1 -E 'seed [0-9]+ \(' "$work/.out" || grep -m1 -A1 -E -e '--- FAIL' "$work/.out" || true) | tr -s ' \n\t' ' ')
			echo "$name: caught in $(($(date +%s) - start)) s by go test $args: ${first#"${first%%[![:space:]]*}"}"
			caught=$((caught + 1))
		fi
	fi
	(cd "$work" && git apply -R "$root/$patch")
done
echo "$caught caught, $failed survived or broken"
[ "$failed" -eq 0 ]
