#!/usr/bin/env bash
# make integration-skew: the integration suite against each kube-apiserver
# of docs/install.md#supported-versions, one after the other: the
# in-process apiserver of go.mod's release, then each binary named in
# SKEW_APISERVERS ("<version>=<path> ..."). Prints one line per version,
#   integration against kube-apiserver vX.Y.Z: P passed, F failed
# (top-level tests; skipped ones are in neither count) and exits non-zero
# when a run failed. Logs: _output/integration-<version>.log.
set -uo pipefail
GO=${GO:-go}
mkdir -p _output
summary=()
status=0
run() { # version [binary]
  local version=$1 bin=${2:-} log=_output/integration-$1.log
  echo "integration-skew: kube-apiserver $version${bin:+ ($bin)}, log $log"
  QGPU_KUBE_APISERVER_BIN=$bin QGPU_KUBE_APISERVER_VERSION=${bin:+$version} \
    "$GO" test -count=1 -v -timeout 45m ./test/integration/... ${SKEW_TEST_FLAGS:-} >"$log" 2>&1
  local rc=$?
  local p f
  p=$(grep -c '^--- PASS' "$log")
  f=$(grep -c '^--- FAIL' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "integration-skew: $version: go test exited $rc (build failure, panic or timeout); last lines:"; tail -20 "$log"; fi
  [ "$rc" -ne 0 ] && status=1
  summary+=("integration against kube-apiserver $version: $p passed, $f failed")
}
run "$KUBE_VERSION"
for entry in ${SKEW_APISERVERS:-}; do
  run "${entry%%=*}" "${entry#*=}"
done
printf '%s\n' "${summary[@]}"
exit $status
