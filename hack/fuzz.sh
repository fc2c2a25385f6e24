#!/usr/bin/env bash
# Runs every Fuzz target in the module for $FUZZTIME each (go test -fuzz takes
# one target per run).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
# run_one fuzzes one target. Minimisation of new corpus entries is capped so
# that it cannot outlast -fuzztime; the Go fuzzing engine still sometimes
# ends a short run with "context deadline exceeded" when a worker is slow to
# stop on a loaded machine (no failing input, nothing written to
# testdata/fuzz). That case alone is retried, twice at most; a real finding
# fails.
run_one() {
	local out try
	for try in 1 2 3; do
		if out=$(go test -run=NONE -fuzz="^$2\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=2s "$1" 2>&1); then
			echo "$out" | tail -n 1
			return 0
		fi
		echo "$out"
		if ! grep -q "context deadline exceeded" <<<"$out" || grep -q "Failing input written" <<<"$out"; then
			return 1
		fi
		echo "fuzz engine timed out stopping (no failing input) on try $try of $2"
	done
	return 1
}

for pkg in $(go list ./... | grep -v /test/integration); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	grep -l '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //'); do
		echo "fuzz $pkg $target ($FUZZTIME)"
		run_one "$pkg" "$target"
	done
done
