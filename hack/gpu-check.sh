#!/usr/bin/env bash
# make gpu-check [DRY=1]: the real-card check's payload (docs/real-card.md)
# in _output/gpu-check, ready to be carried to a lent GPU machine, which has
# the NVIDIA driver, nvcc, cmake and PyTorch but no Go and no network:
#
#   bin/qgpu-gpucheck   the Go half (./test/gpu), linux/amd64, built here
#   run.sh              the script the device runs (test/gpu/run.sh)
#   src/                the CUDA programs it builds there (test/gpu/*.cu)
#   hami-core/          HAMi-core's source, from $HAMI_CORE_TARBALL (never
#                       committed to this repository; built there with cmake)
#   MANIFEST            commit, build time, checksums
#
# DRY=1 then checks it without a GPU, as CI does: the CUDA programs' host
# code against a stand-in header (or nvcc where there is one), run.sh's
# syntax, `run.sh --dry` (plan, payload, the slice's env and mounts from
# the agent's backend; no GPU call), and, as root, run.sh's real flow for
# the memcap step with test/gpu/standin's tools in place of the card's.
# HAMI_CORE_TARBALL=<file> takes another copy of the source.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PAYLOAD=_output/gpu-check
DRY_OUT=_output/gpu-check-dry
start=$(date +%s)

if [ "$(uname -m)" != x86_64 ]; then
	echo "gpu-check: the device machine is x86-64; build the payload on an x86-64 machine (cgo, for go-nvml)" >&2
	exit 1
fi
tarball=${HAMI_CORE_TARBALL:-}

rm -rf "$PAYLOAD"
mkdir -p "$PAYLOAD/bin" "$PAYLOAD/src"
GOOS=linux GOARCH=amd64 CGO_ENABLED=1 "$GO" build -ldflags "-s -w" -o "$PAYLOAD/bin/qgpu-gpucheck" ./test/gpu
install -m 0755 test/gpu/run.sh "$PAYLOAD/run.sh"
cp test/gpu/*.cu test/gpu/*.cuh "$PAYLOAD/src/"
hami="none (the build step will fail on the device)"
if [ -n "$tarball" ]; then
	mkdir "$PAYLOAD/hami-core"
	tar -xzf "$tarball" -C "$PAYLOAD/hami-core" --strip-components=1
	rev=$(basename "$tarball" .tar.gz)
	hami="${rev#hami-core-} ($(basename "$tarball"), sha256 $(sha256sum "$tarball" | cut -d' ' -f1))"
else
	echo "gpu-check: HAMI_CORE_TARBALL names no HAMi-core source tarball: the payload has no HAMi-core (docs/real-card.md)" >&2
fi
glibc=$(objdump -T "$PAYLOAD/bin/qgpu-gpucheck" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1 || true)
{
	echo "describe $(git describe --tags --always --dirty 2>/dev/null || echo unknown)"
	echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	echo "built $(date -u +%FT%TZ) with $("$GO" version | cut -d' ' -f3), needs ${glibc:-glibc (unknown version)}"
	echo "hami-core $hami"
	echo "files:"
	(cd "$PAYLOAD" && sha256sum run.sh bin/qgpu-gpucheck src/*)
} >"$PAYLOAD/MANIFEST"
echo "gpu-check: payload $PAYLOAD ($(du -sh "$PAYLOAD" | cut -f1)), HAMi-core ${hami%% *}, qgpu-gpucheck needs ${glibc:-?}"

# The CUDA programs: compiled where nvcc is, else their host code checked
# against test/gpu/stub (each launch `k<<<cfg>>>(args)` made a plain call).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in test/gpu/*.cu; do
	if command -v nvcc >/dev/null; then
		nvcc -std=c++17 -c -o "$tmp/$(basename "$f").o" "$f"
		how="compiled with nvcc"
	else
		sed -E 's/([A-Za-z_][A-Za-z_0-9]*)<<<([^>]*)>>>\(/(gpucheck_launch(\2), \1)(/g' "$f" |
			g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -x c++ -I test/gpu/stub -I test/gpu -
		how="host code checked with g++ against test/gpu/stub (no nvcc here)"
	fi
done
echo "gpu-check: $(cd test/gpu && echo *.cu) $how"

if [ -z "${DRY:-}" ]; then
	cat <<-EOF
		gpu-check: on a lent GPU, from the checkout that travels (docs/real-card.md):
		  run  command: bash _output/gpu-check/run.sh --out "\$OUT"   carry: ["_output/gpu-check"]   timeout_s: 390
		  then give_back (unless rerunning at once: --only <steps> --budget <seconds>)
	EOF
	exit 0
fi

bash -n "$PAYLOAD/run.sh"
rm -rf "$DRY_OUT"
bash "$PAYLOAD/run.sh" --dry --out "$DRY_OUT" --work "$DRY_OUT/work"

# The script's real flow (setup, build, memcap, teardown: steps, timeouts,
# slices, judges, report) with the stand-ins of test/gpu/standin for
# nvidia-smi, nvcc, cmake and the programs; no mount namespace (the
# stand-in unshare fails: the preload path), the cgroups and the lock
# directory in scratch directories. run.sh needs root.
if [ "$(id -u)" -ne 0 ]; then
	echo "gpu-check DRY=1: the stand-in run is skipped (run.sh needs root)"
else
	smoke=$DRY_OUT/standin
	mkdir -p "$smoke"
	if ! PATH=$PWD/test/gpu/standin:$PATH QGPU_GPUCHECK_CGROUP_ROOT=$PWD/$smoke/cgroup QGPU_GPUCHECK_LOCK_DIR=$PWD/$smoke/lock \
		bash "$PAYLOAD/run.sh" --only memcap --budget 120 --work "$smoke/work" --out "$smoke" >"$smoke/run.log" 2>&1; then
		cat "$smoke/run.log"
		echo "gpu-check DRY=1: the stand-in run failed" >&2
		exit 1
	fi
	table=$(sed -n '/^| step/,/^$/p' "$smoke/gpu-check/report.md")
	if grep -q '| FAIL |' <<<"$table" || ! grep -q '| memcap/slice | PASS |' <<<"$table"; then
		echo "$table"
		echo "gpu-check DRY=1: the stand-in run's report has failures ($smoke/gpu-check/report.md)" >&2
		exit 1
	fi
	echo "gpu-check DRY=1: stand-in run (nvidia-smi, nvcc, cmake and the programs stood in for): $(grep -c '| PASS |' <<<"$table") PASS, $(grep -c '| SKIP |' <<<"$table") SKIP, no FAIL"
fi
echo "gpu-check DRY=1: passed in $(($(date +%s) - start)) s; report $DRY_OUT/gpu-check/report.md"
