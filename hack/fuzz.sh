#!/usr/bin/env bash
# Runs every native fuzz target of the repository for a bounded time each:
#   hack/fuzz.sh [FUZZTIME]      (default 3s; e.g. 10m by hand)
# go test -fuzz takes one target of one package at a time, so the targets
# are found by name and run one after another. A crash fails the run and
# leaves its input in the package's testdata/fuzz/<target>/ to keep as a
# regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-3s}"
targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
	xargs grep -H -oE '^func Fuzz[A-Za-z0-9_]+' | sed -E 's#^\./(.*)/[^/]+:func (Fuzz.*)#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while read -r pkg target; do
	echo "== $pkg $target ($fuzztime)"
	status=0
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 1 "./$pkg" >"$log" 2>&1 || status=$?
	# The last progress line says how many inputs ran.
	grep -E '^fuzz: elapsed' "$log" | tail -n 1 || true
	if [ "$status" -ne 0 ]; then
		cat "$log"
		echo "FAIL: $pkg $target" >&2
		exit 1
	fi
done <<<"$targets"
