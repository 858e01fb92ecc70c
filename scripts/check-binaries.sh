#!/usr/bin/env bash
# make lint: fail when git tracks an executable (ELF, Mach-O or PE). Build
# outputs belong in bin/ or nowhere; .gitignore names the usual ones, this
# catches the rest before they reach a commit.
set -euo pipefail
cd "$(dirname "$0")/.."

found=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) kind=ELF ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) kind=Mach-O ;;
	4d5a*) kind=PE ;;
	*) continue ;;
	esac
	echo "tracked executable ($kind): $f" >&2
	found=1
done < <(git ls-files -z)

if [ "$found" -ne 0 ]; then
	echo "remove it from git (git rm --cached FILE) and build into bin/ (make build)" >&2
	exit 1
fi
