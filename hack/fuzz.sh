#!/usr/bin/env bash
# Runs every Fuzz target in the module for $FUZZTIME each (go test -fuzz takes
# one target per run).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
for pkg in $(go list ./... | grep -v /test/integration); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	grep -l '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //'); do
		echo "fuzz $pkg $target ($FUZZTIME)"
		go test -run=NONE -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg"
	done
done
