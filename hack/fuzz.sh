#!/usr/bin/env bash
# Runs every native fuzz target of the repository for a bounded time each:
#   hack/fuzz.sh [FUZZTIME]      (default 300x: 300 inputs; 10m by hand)
# go test -fuzz takes one target of one package at a time, so the targets
# are found by name and run one after another. A crash fails the run and
# leaves its input in the package's testdata/fuzz/<target>/ to keep as a
# regression case. Without vet: make test's first step vetted the same
# code, and the fuzz build's instrumentation would have vet compute its
# facts again for every dependency.
#
# A count (Nx) is what CI uses: with a duration, Go 1.26's fuzz coordinator
# can report a bare "context deadline exceeded" failure as the time runs
# out on a loaded machine, with no failing input (go.dev/issue/75804,
# fixed in Go 1.27). Such a failure, without a new input written, is
# reported as that and not counted as a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-300x}"
targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
	xargs grep -H -oE '^func Fuzz[A-Za-z0-9_]+' | sed -E 's#^\./(.*)/[^/]+:func (Fuzz.*)#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
# inputs counts the failing inputs kept for a target.
inputs() {
	if [ -d "$1" ]; then
		find "$1" -type f | wc -l
	else
		echo 0
	fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while read -r pkg target; do
	echo "== $pkg $target ($fuzztime)"
	corpus="$pkg/testdata/fuzz/$target"
	before=$(inputs "$corpus")
	status=0
	go test -vet=off -ldflags=-w -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 1 "./$pkg" >"$log" 2>&1 || status=$?
	# The last progress line says how many inputs ran.
	grep -E '^fuzz: elapsed' "$log" | tail -n 1 || true
	after=$(inputs "$corpus")
	if [ "$status" -ne 0 ] && [ "$after" -eq "$before" ] && grep -qE '^[[:space:]]+context deadline exceeded$' "$log"; then
		echo "the fuzz coordinator stopped with go.dev/issue/75804 (no failing input): not a crash"
		continue
	fi
	if [ "$status" -ne 0 ]; then
		cat "$log"
		echo "FAIL: $pkg $target" >&2
		exit 1
	fi
done <<<"$targets"
