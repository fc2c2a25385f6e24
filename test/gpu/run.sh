#!/usr/bin/env bash
# run.sh: the real-card check (docs/real-card.md). `make gpu-check` copies it
# into the payload (_output/gpu-check) beside the programs it runs; on a lent
# GPU machine (root, the NVIDIA driver, nvcc, cmake; no Go, no network):
#
#   bash _output/gpu-check/run.sh --out "$OUT"       the check, under 6 minutes
#   bash _output/gpu-check/run.sh --dry --out DIR    no GPU: the plan, the payload, the slice's env and mounts
#
# Flags: --budget SECONDS (default 360: the whole run, steps trimmed to fit),
# --only STEP[,STEP] (setup, build and teardown always run), --work DIR
# (default /tmp/qgpu-gpucheck). It writes <out>/gpu-check/: report.md,
# steps.log, hami-build.log, cdi-qgpu.yaml, cdi-nvidia-ctk.yaml, raw.tar.gz.
#
# Hard rules, kept by every step: the card's compute mode, MIG mode, clocks,
# persistence, power limit and ECC are never changed and the card is never
# reset (teardown compares them with what setup recorded); no daemon is
# started (MPS is skipped); every program runs under its own timeout and
# every step under the step's; a step that fails writes why into the report
# and the next step runs; every process started is ended by its PID.
set -u -o pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
BIN=$HERE/bin/qgpu-gpucheck

# name, budget in seconds (its timeout), what it measures. Expected total
# about 3.5 minutes; the budgets are ceilings.
STEPS=(
	"setup 20 the card, driver, CUDA and tools; the card's settings recorded"
	"build 150 nvcc builds the CUDA programs, cmake builds HAMi-core's libvgpu.so (in the background during inventory and cdi)"
	"inventory 20 the agent's NVML discovery (agent/nvml) against nvidia-smi -L"
	"cdi 40 the agent's card CDI spec (agent/cardspec) from the real driver root, against nvidia-ctk cdi generate"
	"memcap 60 HAMi-core's memory cap with the agent's env and mounts for a 4 GiB / 30 % slice; a pod's own limit variables"
	"compute 100 HAMi-core's SM cap: a compute-bound loop at 30 % against 100 %; the per-card variable a pod sets itself"
	"region 45 agent/hamiregion reads the region the real library wrote; a blocked process stops and resumes"
	"colocation 110 an online process's launch latency beside an offline one: uncontrolled, capped, interception, freezer"
	"mps 10 MPS (skipped: the agent's MPS daemon changes the card's compute mode)"
	"teardown 30 nothing left running, nothing mounted, the card's settings unchanged"
)
TEARDOWN_RESERVE=30

die() {
	echo "run.sh: $*" >&2
	exit 2
}

# ---- results and the report --------------------------------------------

# result STATUS SUMMARY: one row of the report's table for the current step
# (STEP_NAME, or the sub-check in SUBCHECK).
result() {
	local name=${SUBCHECK:-$STEP_NAME}
	printf '%s\t%s\t%s\n' "$name" "$1" "${2//$'\t'/ }" >>"$W/results.tsv"
	echo "RESULT $name: $1 $2"
}

# detail TEXT...: a line of the step's section in the report.
detail() { printf '%s\n' "$*" >>"$W/details/$STEP_NAME.md"; }

# detail_file FILE [LINES]: the end of a file, fenced.
detail_file() {
	[ -s "$1" ] || return 0
	{
		echo
		echo "\`$(basename "$1")\`:"
		echo '```'
		tail -n "${2:-40}" "$1"
		echo '```'
	} >>"$W/details/$STEP_NAME.md"
}

# verdict_of FILE: the `verdict PASS|FAIL why` line qgpu-gpucheck printed.
verdict_of() {
	local line
	line=$(grep '^verdict ' "$1" | tail -n 1)
	if [ -z "$line" ]; then
		echo "FAIL no verdict (qgpu-gpucheck: $(tail -n 1 "$1" 2>/dev/null))"
	else
		echo "${line#verdict }"
	fi
}

# judged FILE: a result from qgpu-gpucheck's verdict.
judged() {
	local v
	v=$(verdict_of "$1")
	result "${v%% *}" "${v#* }"
}

write_report() {
	local report=$OUTDIR/report.md tmp
	tmp=$report.$BASHPID.tmp # the build step writes it too, from the background
	{
		echo "# qgpu-scheduler real-card check"
		echo
		[ -f "$HERE/MANIFEST" ] && sed -n 's/^\(commit\|built\|describe\) /- \1: /p' "$HERE/MANIFEST"
		[ -f "$W/card.env" ] && sed -n 's/^\(CARD_NAME\|DRIVER\|CUDA_VERSION\|MODE\)=/- \1: /p' "$W/card.env"
		echo "- run: $(date -u +%FT%TZ), $(($(date +%s) - START)) s of a $BUDGET s budget${DRY:+ (dry run: no GPU call)}"
		echo
		echo "| step | result | summary |"
		echo "|---|---|---|"
		if [ -s "$W/results.tsv" ]; then
			while IFS=$'\t' read -r name status summary; do
				echo "| $name | $status | ${summary//|//} |"
			done <"$W/results.tsv"
		fi
		for s in "${STEPS[@]}"; do
			local n=${s%% *}
			[ -s "$W/details/$n.md" ] || continue
			echo
			echo "## $n"
			echo
			cat "$W/details/$n.md"
		done
	} >"$tmp" && mv "$tmp" "$report"
}

# ---- processes -----------------------------------------------------------

# launch NAME LIMIT VIEW|- CMD...: CMD in the background, under its own
# timeout, inside the slice VIEW (or plainly for -); stdout to
# $W/logs/NAME.out, stderr to NAME.err. Sets LAUNCHED to the timeout's PID
# (a TERM to it ends the program) and records it for the cleanup.
launch() {
	local name=$1 limit=$2 view=$3
	shift 3
	(
		exec >"$W/logs/$name.out" 2>"$W/logs/$name.err"
		if [ "$view" = - ]; then
			exec timeout --foreground -k 3 "$limit" "$@"
		elif [ "$MODE" = namespace ]; then
			exec timeout --foreground -k 3 "$limit" unshare --mount --propagation private -- bash "$SELF" --enter "$view" -- "$@"
		else
			local envs=()
			mapfile -t envs < <(sed -n 's/^env //p' "${view%.view}.preload")
			exec timeout --foreground -k 3 "$limit" env "${envs[@]}" "$@"
		fi
	) &
	LAUNCHED=$!
	echo "$LAUNCHED" >>"$W/pids"
}

# run NAME LIMIT VIEW|- CMD...: launch and wait; returns the program's status.
run() {
	launch "$@"
	wait "$LAUNCHED"
}

# program_pid NAME KIND [WAIT]: the pid the program printed on its first
# line (`spin pid=...`), waiting up to WAIT seconds for it.
program_pid() {
	local i pid
	for ((i = 0; i < ${3:-15} * 10; i++)); do
		pid=$(sed -n "s/^$2 pid=\([0-9]*\).*/\1/p" "$W/logs/$1.out" 2>/dev/null | head -n 1)
		if [ -n "$pid" ]; then
			echo "$pid" >>"$W/pids"
			echo "$pid"
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# wait_progress NAME [WAIT]: until the spin program NAME reports progress.
wait_progress() {
	local i
	for ((i = 0; i < ${2:-15} * 10; i++)); do
		grep -q '^progress .*kernels=[1-9]' "$W/logs/$1.out" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ours PID: whether the process is one of this run's (its command line
# names the payload or the work directory, or it is one of our timeouts).
ours() {
	local cmd
	cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
	case $cmd in
	*"$HERE"* | *"$W"* | timeout*) return 0 ;;
	esac
	return 1
}

# end_pids: TERM, then KILL, every recorded process still running, by PID.
end_pids() {
	[ -s "$W/pids" ] || return 0
	local pid left=()
	while read -r pid; do
		if ours "$pid"; then
			kill -TERM "$pid" 2>/dev/null && left+=("$pid")
		fi
	done < <(sort -un "$W/pids")
	[ ${#left[@]} -eq 0 ] && return 0
	sleep 2
	for pid in "${left[@]}"; do
		ours "$pid" && kill -KILL "$pid" 2>/dev/null
	done
	return 0
}

# ---- slices --------------------------------------------------------------

# slice NAME HAMI-SLICE-FLAGS...: the agent's hami-core answer for the card
# (qgpu-gpucheck hami-slice: the backend's own code, the CDI delivery applied
# over what the pod sets itself) as $W/slices/NAME.view (env and mount
# lines) and NAME.preload (LD_PRELOAD and host paths, for machines without
# mount namespaces). A new pod UID each time: the first process of a
# container decides its region's limits.
slice() {
	local name=$1
	shift
	local common=(--uuid "$CARD_UUID" --index "$CARD_INDEX" --root "$W/hami" --lib-dir "$W/hami/lib" --lock-dir "$LOCK_DIR" --pod-uid "gpucheck-$name")
	"$BIN" hami-slice "${common[@]}" "$@" >"$W/slices/$name.view" 2>"$W/slices/$name.err" &&
		"$BIN" hami-slice "${common[@]}" "$@" --format preload >"$W/slices/$name.preload" 2>>"$W/slices/$name.err" &&
		mountpoints "$W/slices/$name.view" && return 0
	detail "hami-slice $name failed: $(tail -n 3 "$W/slices/$name.err")"
	return 1
}

# mountpoints VIEW: the slice's mount targets must exist to be mounted
# over; those this run creates are recorded and removed by teardown
# (/etc/ld.so.preload only as an empty file, which the loader ignores).
mountpoints() {
	[ "$MODE" = namespace ] && [ -z "$DRY" ] || return 0
	local kind dest src mode top
	while read -r kind dest src mode; do
		[ "$kind" = mount ] || continue
		[ -e "$dest" ] && continue
		top=$dest
		while [ ! -e "$(dirname "$top")" ]; do top=$(dirname "$top"); done
		if [ -d "$src" ]; then
			mkdir -p "$dest" || return 1
		else
			mkdir -p "$(dirname "$dest")" && : >"$dest" || return 1
		fi
		echo "$top" >>"$W/created"
	done <"$1"
}

# enter VIEW -- CMD...: inside a new mount namespace (unshare): the view's
# bind mounts, read-only where the agent mounts them so, /etc/ld.so.preload
# last (the mount commands themselves run without the library), then CMD
# with the view's variables: what the container's process would see.
enter() {
	local view=$1
	shift 2
	local envs=() preload=() kind a b c
	while read -r kind a b c; do
		case $kind in
		env) envs+=("$a") ;;
		mount)
			if [ "$a" = /etc/ld.so.preload ]; then
				preload=("$a" "$b" "$c")
				continue
			fi
			bind_mount "$b" "$a" "$c" || exit 97
			;;
		esac
	done <"$view"
	[ ${#preload[@]} -eq 0 ] || bind_mount "${preload[1]}" "${preload[0]}" "${preload[2]}" || exit 97
	exec env "${envs[@]}" "$@"
}

bind_mount() {
	local src=$1 dest=$2 mode=$3
	if [ -n "${DRY_MOUNTS:-}" ]; then
		echo "mount --bind $src $dest ($mode)"
		return 0
	fi
	mount --bind "$src" "$dest" || return 1
	[ "$mode" = ro ] || return 0
	mount -o remount,bind,ro "$dest"
}

# ---- steps ---------------------------------------------------------------

step_setup() {
	local tool
	for tool in nvidia-smi timeout unshare mount tar; do
		command -v "$tool" >/dev/null || detail "missing: $tool"
	done
	if ! timeout 15 nvidia-smi -L >"$W/smi-list.txt" 2>&1; then
		detail_file "$W/smi-list.txt"
		result FAIL "nvidia-smi -L failed: no card to check"
		return 1
	fi
	timeout 15 nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits >"$W/smi-mem.csv"
	card_settings >"$W/settings-before.csv"
	local line cuda_home nvcc_path
	line=$(timeout 15 nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader -i 0)
	IFS=, read -r CARD_INDEX CARD_UUID CARD_NAME DRIVER <<<"$line"
	CARD_INDEX=$(trim "$CARD_INDEX") CARD_UUID=$(trim "$CARD_UUID") CARD_NAME=$(trim "$CARD_NAME") DRIVER=$(trim "$DRIVER")
	[ -e "$LOCK_DIR" ] || echo "$LOCK_DIR" >>"$W/created" # the agent's backend creates it (1777)
	nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
	cuda_home=${CUDA_HOME:-$(dirname "$(dirname "${nvcc_path:-/usr/local/cuda/bin/nvcc}")")}
	MODE=preload
	if namespace_works; then MODE=namespace; fi
	cat >"$W/card.env" <<-EOF
		CARD_INDEX=$CARD_INDEX
		CARD_UUID=$CARD_UUID
		CARD_NAME='$CARD_NAME'
		DRIVER=$DRIVER
		CUDA_HOME=$cuda_home
		NVCC=$nvcc_path
		CUDA_VERSION='$("${nvcc_path:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p')'
		MODE=$MODE
	EOF
	{
		echo "- card 0: $CARD_NAME ($CARD_UUID), driver $DRIVER"
		echo "- nvcc: ${nvcc_path:-none}; cmake: $(cmake --version 2>/dev/null | head -n 1)"
		echo "- kernel $(uname -r); cgroup mount: $(stat -fc %T /sys/fs/cgroup 2>/dev/null)"
		echo "- nvidia-ctk: $(command -v nvidia-ctk || echo none); nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo none)"
		if [ "$MODE" = namespace ]; then
			echo "- slices run in a private mount namespace with the agent's mounts (/etc/ld.so.preload among them)"
		else
			echo "- no read-only bind mount in a private mount namespace here: slices run with LD_PRELOAD and the mounts' host paths"
		fi
	} >>"$W/details/setup.md"
	detail_file "$W/smi-list.txt"
	detail_file "$W/settings-before.csv"
	result INFO "$CARD_NAME, driver $DRIVER, $MODE mode"
}

trim() {
	local s=$1
	s=${s#"${s%%[![:space:]]*}"}
	echo "${s%"${s##*[![:space:]]}"}"
}

# card_settings: what this run must leave as it found it.
card_settings() {
	timeout 15 nvidia-smi --query-gpu=index,uuid,compute_mode,mig.mode.current,mig.mode.pending,persistence_mode,ecc.mode.current,ecc.mode.pending,clocks.applications.graphics,clocks.applications.memory,power.limit --format=csv
}

# namespace_works: a read-only bind mount in a private mount namespace.
namespace_works() {
	local a=$W/ns-probe-src b=$W/ns-probe-dst
	echo probe >"$a" && : >"$b" || return 1
	timeout 10 unshare --mount --propagation private -- bash -c \
		"mount --bind '$a' '$b' && mount -o remount,bind,ro '$b' && grep -q probe '$b' && ! (echo x >'$b') 2>/dev/null" 2>/dev/null
	local rc=$?
	rm -f "$a" "$b"
	return $rc
}

step_build() {
	local f name pids=() ok=() failed=() arch
	mkdir -p "$W/bin"
	if [ -z "$NVCC" ]; then
		SUBCHECK=build/cuda result FAIL "no nvcc on PATH or in /usr/local/cuda/bin"
	fi
	for f in "$HERE"/src/*.cu; do
		[ -n "$NVCC" ] || break
		name=$(basename "$f" .cu)
		(
			for arch in -arch=native ""; do
				"$NVCC" -O2 -std=c++17 $arch -o "$W/bin/$name" "$f" >"$W/logs/nvcc-$name.log" 2>&1 && exit 0
			done
			exit 1
		) &
		pids+=("$!:$name")
	done
	build_hami &
	local hami_pid=$!
	for f in "${pids[@]}"; do
		if wait "${f%%:*}"; then ok+=("${f#*:}"); else failed+=("${f#*:}"); fi
	done
	SUBCHECK=build/cuda
	if [ -z "$NVCC" ]; then
		:
	elif [ ${#failed[@]} -eq 0 ]; then
		result PASS "nvcc built ${ok[*]}"
	else
		for f in "${failed[@]}"; do detail_file "$W/logs/nvcc-$f.log" 20; done
		result FAIL "nvcc failed on ${failed[*]} (built: ${ok[*]:-none})"
	fi
	SUBCHECK=build/hami-core
	if wait "$hami_pid"; then
		result PASS "libvgpu.so built from HAMi-core $(sed -n 's/^hami-core //p' "$HERE/MANIFEST") ($(cat "$W/hami-build.how"))"
	else
		detail_file "$OUTDIR/hami-build.log" 30
		result FAIL "HAMi-core did not build ($(cat "$W/hami-build.how" 2>/dev/null)): hami-build.log"
	fi
}

# build_hami: libvgpu.so as HAMi-core's build.sh builds it (its cmake
# options), the library target alone; CMake 4 needs the policy floor the
# 2.8 project predates. If configuring fails on the test directory (it
# needs the FindCUDA module), once more without it, in a copy.
build_hami() {
	local log=$OUTDIR/hami-build.log src=$W/hami-src opts
	[ -f "$HERE/hami-core/CMakeLists.txt" ] || {
		echo "no HAMi-core source in the payload" >"$W/hami-build.how"
		return 1
	}
	rm -rf "$src" && cp -r "$HERE/hami-core" "$src" || return 1
	opts=(-DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1
		-DCMAKE_BUILD_TYPE=Debug -DTEST_DEVICE_ID=0 -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
	# -lcuda and -lnvidia-ml: CUDA's stubs where the toolkit has them, and
	# the driver's own libraries under their plain names (a driver install
	# may lack the libcuda.so link).
	local link=$W/hami-link lib ldflags=''
	mkdir -p "$link"
	for lib in libcuda.so libnvidia-ml.so; do
		ln -sf "$(ldconfig -p | sed -n "s|.*\($lib\.1\) (libc6,x86-64) => ||p" | head -n 1)" "$link/$lib" 2>/dev/null
	done
	[ -d "$CUDA_HOME/lib64/stubs" ] && ldflags="-L$CUDA_HOME/lib64/stubs "
	opts+=("-DCMAKE_SHARED_LINKER_FLAGS=$ldflags-L$link")
	echo "as build.sh" >"$W/hami-build.how"
	if ! (cd "$src" && CUDA_HOME=$CUDA_HOME cmake -S . -B build "${opts[@]}") >"$log" 2>&1; then
		echo "as build.sh, without its test directory (configuring it failed)" >"$W/hami-build.how"
		sed -i 's/^add_subdirectory(test)/# &/' "$src/CMakeLists.txt"
		rm -rf "$src/build"
		(cd "$src" && CUDA_HOME=$CUDA_HOME cmake -S . -B build "${opts[@]}") >>"$log" 2>&1 || return 1
	fi
	(cd "$src" && cmake --build build --target vgpu -j "$(nproc)") >>"$log" 2>&1 || return 1
	mkdir -p "$W/hami/lib" && install -m 0644 "$src/build/libvgpu.so" "$W/hami/lib/libvgpu.so"
}

step_inventory() {
	"$BIN" inventory --smi-list "$W/smi-list.txt" --smi-csv "$W/smi-mem.csv" >"$W/logs/inventory.out" 2>&1
	detail_file "$W/logs/inventory.out"
	judged "$W/logs/inventory.out"
}

step_cdi() {
	local compare=()
	mkdir -p "$W/cdi-qgpu" "$W/cdi-nvidia"
	if command -v nvidia-ctk >/dev/null; then
		detail "- $(nvidia-ctk --version 2>&1 | head -n 1)"
		if timeout 30 nvidia-ctk cdi generate --output="$W/cdi-nvidia/nvidia.yaml" >"$W/logs/nvidia-ctk.log" 2>&1; then
			compare=(--compare "$W/cdi-nvidia/nvidia.yaml")
			cp "$W/cdi-nvidia/nvidia.yaml" "$OUTDIR/cdi-nvidia-ctk.yaml"
		else
			detail "- nvidia-ctk cdi generate failed: no comparison"
			detail_file "$W/logs/nvidia-ctk.log" 10
		fi
	else
		detail "- nvidia-ctk is not installed here: the agent's spec is checked alone"
	fi
	"$BIN" cdi --dir "$W/cdi-qgpu" "${compare[@]}" >"$W/logs/cdi.out" 2>&1
	cp "$W/cdi-qgpu/qgpu.io-gpu.yaml" "$OUTDIR/cdi-qgpu.yaml" 2>/dev/null
	detail_file "$W/logs/cdi.out"
	judged "$W/logs/cdi.out"
}

# needs FILE...: whether the build left what a step runs.
needs() {
	local f
	for f in "$@"; do
		[ -e "$f" ] || {
			result SKIP "$(basename "$f") was not built (see build)"
			return 1
		}
	done
}

# What a pod that wants more than its slice sets in its own spec
# (docs/backend-hami-core.md): per-card and plain limits, no throttling,
# its own region.
ATTACK=(--pod-env CUDA_DEVICE_MEMORY_LIMIT_0=80g --pod-env CUDA_DEVICE_MEMORY_LIMIT=80g
	--pod-env CUDA_DEVICE_SM_LIMIT_0=100 --pod-env CUDA_DEVICE_SM_LIMIT=100
	--pod-env GPU_CORE_UTILIZATION_POLICY=disable --pod-env CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine.cache)

step_memcap() {
	needs "$W/bin/memcap" "$W/hami/lib/libvgpu.so" || return 0
	local name want
	slice mem-slice || { result FAIL "no slice"; return 0; }
	slice mem-escape "${ATTACK[@]}" || { result FAIL "no slice"; return 0; }
	slice mem-envvar --delivery envvar "${ATTACK[@]}" || { result FAIL "no slice"; return 0; }
	detail "The agent's view of the slice (card 0, 4 GiB, 30 %, fixed-share, CDI delivery; ordinals 1 to 15 hold the same limits):"
	grep -v -E '_LIMIT_([1-9]|1[0-5])=' "$W/slices/mem-slice.view" >"$W/slices/mem-slice.shown"
	detail_file "$W/slices/mem-slice.shown" 40
	for name in mem-slice:capped mem-escape:capped mem-envvar:uncapped; do
		want=${name#*:} name=${name%%:*}
		SUBCHECK=memcap/${name#mem-}
		run "$name" 40 "$W/slices/$name.view" "$W/bin/memcap" 3 5
		"$BIN" judge memcap --log "$W/logs/$name.out" --cap-gib 4 --want "$want" >"$W/logs/$name.judge" 2>&1
		detail "- $SUBCHECK (want $want): $(tr '\n' ' ' <"$W/logs/$name.out")"
		grep -q '^verdict PASS' "$W/logs/$name.judge" || detail_file "$W/logs/$name.err" 15
		judged "$W/logs/$name.judge"
	done
}

step_compute() {
	needs "$W/bin/spin" "$W/hami/lib/libvgpu.so" || return 0
	SUBCHECK=compute/full
	if ! run sm-full 30 - "$W/bin/spin" --seconds 8 --target-ms 2; then
		detail_file "$W/logs/sm-full.err" 15
		result FAIL "spin without the library failed"
		return 0
	fi
	local iters
	iters=$(sed -n 's/^spin .* iters=\([0-9]*\).*/\1/p' "$W/logs/sm-full.out")
	echo "$iters" >"$W/spin-iters"
	result INFO "$(grep '^spin ' "$W/logs/sm-full.out" | cut -d' ' -f3-); $(grep '^done ' "$W/logs/sm-full.out")"
	slice sm-slice || return 0
	slice sm-escape "${ATTACK[@]}" || return 0
	# An older agent set only the plain CUDA_DEVICE_SM_LIMIT: the pod's
	# per-card value then won. Expected uncapped: the library reads the
	# per-card form first, which is why the agent sets all 16.
	slice sm-older-agent --drop-agent-var 'CUDA_DEVICE_SM_LIMIT_*' --pod-env CUDA_DEVICE_SM_LIMIT_0=100 || return 0
	local c want tol
	for c in sm-slice:0.30:0.15 sm-escape:0.30:0.15 sm-older-agent:1.0:0.25; do
		IFS=: read -r c want tol <<<"$c"
		SUBCHECK=compute/${c#sm-}
		run "$c" 40 "$W/slices/$c.view" "$W/bin/spin" --seconds 11 --iters "$iters"
		"$BIN" judge compute --full "$W/logs/sm-full.out" --test "$W/logs/$c.out" --want-ratio "$want" --tolerance "$tol" --skip-ms 3000 >"$W/logs/$c.judge" 2>&1
		grep -q '^verdict PASS' "$W/logs/$c.judge" || detail_file "$W/logs/$c.err" 15
		judged "$W/logs/$c.judge"
	done
}

step_region() {
	needs "$W/bin/spin" "$W/hami/lib/libvgpu.so" || return 0
	local iters pid region=$W/hami/regions/gpucheck-region_main/cudevshr.cache t0
	iters=$(cat "$W/spin-iters" 2>/dev/null || echo 100000)
	slice region || return 0
	launch region-spin 30 "$W/slices/region.view" "$W/bin/spin" --seconds 14 --iters "$iters"
	local spin=$LAUNCHED
	SUBCHECK=region/read
	if ! pid=$(program_pid region-spin spin 15); then
		detail_file "$W/logs/region-spin.err" 15
		result FAIL "spin under the slice did not start"
		return 0
	fi
	"$BIN" region --path "$region" --wait 10s --uuid "$CARD_UUID" --sm-limit 30 --pid "$pid" >"$W/logs/region.out" 2>&1
	detail_file "$W/logs/region.out"
	judged "$W/logs/region.out"
	SUBCHECK=region/block-resume
	wait_progress region-spin 10
	t0=$(sed -n 's/^progress t_ms=\([0-9]*\).*/\1/p' "$W/logs/region-spin.out" | head -n 1)
	while [ $(($(date +%s%3N) - t0)) -lt 3000 ]; do sleep 0.1; done # 3 s of launches before the block
	"$BIN" block --path "$region" --hold 4s --every 100ms --wait 5s >"$W/logs/block.out" 2>&1
	wait "$spin"
	detail_file "$W/logs/block.out" 10
	if ! grep -q '^block ' "$W/logs/block.out"; then
		judged "$W/logs/block.out" # the block never started: why
		return 0
	fi
	"$BIN" judge block --log "$W/logs/region-spin.out" --block-log "$W/logs/block.out" >"$W/logs/block.judge" 2>&1
	detail_file "$W/logs/block.judge" 5
	judged "$W/logs/block.judge"
}

step_colocation() {
	needs "$W/bin/spin" "$W/bin/online" "$W/hami/lib/libvgpu.so" || return 0
	local iters dir=$W/colocation
	iters=$(cat "$W/spin-iters" 2>/dev/null || echo 100000)
	mkdir -p "$dir"
	slice offline-capped --class offline || return 0
	slice offline-int --class offline || return 0
	ONLINE=("$W/bin/online" --seconds 4 --gap-us 500)
	SPIN=("$W/bin/spin" --seconds 30 --iters "$iters")

	run online-alone 20 - "${ONLINE[@]}"
	cp "$W/logs/online-alone.out" "$dir/online-alone.txt"

	colocate uncontrolled - 1
	colocate capped "$W/slices/offline-capped.view" 2
	colocate interception "$W/slices/offline-int.view" 1 intercept
	colocate freezer - 1 freeze

	"$BIN" judge colocation --dir "$dir" >"$W/logs/colocation.judge" 2>&1
	detail "Offline kernels/s are counted over the online process's run (4 s of launches, 500 µs apart)."
	detail "$(grep -v '^verdict' "$W/logs/colocation.judge")"
	judged "$W/logs/colocation.judge"
}

# colocate SCENARIO VIEW SETTLE [intercept|freeze]: the offline spin (in
# VIEW), once it computes and SETTLE seconds later the online process, with
# the offline process suspended meanwhile as the priority controller would.
colocate() {
	local sc=$1 view=$2 settle=$3 how=${4:-} dir=$W/colocation off pid helper='' i
	launch "offline-$sc" 45 "$view" "${SPIN[@]}"
	off=$LAUNCHED
	if ! pid=$(program_pid "offline-$sc" spin 15) || ! wait_progress "offline-$sc" 15; then
		detail "- $sc: the offline process did not start: $(tail -n 2 "$W/logs/offline-$sc.err" | tr '\n' ' ')"
		kill -TERM "$off" 2>/dev/null
		wait "$off"
		return 0
	fi
	# The suspension holds until the online run is over (its helper is
	# then ended: both release on TERM), as the controller holds it while
	# the online pod is busy.
	case $how in
	intercept)
		"$BIN" block --path "$W/hami/regions/gpucheck-offline-int_main/cudevshr.cache" --hold 25s --wait 5s >"$W/logs/intercept.out" 2>&1 &
		helper=$!
		sleep 1.5 # the library sees the block at the offline process's next launch
		;;
	freeze)
		local cg cgroot
		if ! read -r cgroot cg < <(freezer_create "$pid") || [ -z "$cg" ]; then
			detail "- freezer: cgroups do not allow it here: $(tail -n 2 "$W/logs/cgroup.out" | tr '\n' ' ')"
			kill -TERM "$off" 2>/dev/null
			wait "$off"
			return 0
		fi
		"$BIN" freezer freeze --root "$cgroot" --dir "$cg" --hold 25s >"$W/logs/freeze.out" 2>&1 &
		helper=$!
		sleep 0.5
		;;
	esac
	sleep "$settle"
	run "online-$sc" 20 - "${ONLINE[@]}"
	if [ -n "$helper" ]; then
		kill -TERM "$helper" 2>/dev/null
		wait "$helper"
	fi
	# The offline rate is counted up to the online run's end: wait for a
	# report past it (a released process reports again within a second).
	local end_ms
	end_ms=$(sed -n 's/^online .*end_ms=\([0-9]*\).*/\1/p' "$W/logs/online-$sc.out")
	for ((i = 0; i < 30; i++)); do
		[ -z "$end_ms" ] && break
		[ "$(sed -n 's/^progress t_ms=\([0-9]*\).*/\1/p' "$W/logs/offline-$sc.out" | tail -n 1)" -ge "$end_ms" ] && break
		sleep 0.1
	done
	kill -TERM "$off" 2>/dev/null
	wait "$off"
	cp "$W/logs/online-$sc.out" "$dir/online-$sc.txt"
	cp "$W/logs/offline-$sc.out" "$dir/offline-$sc.txt"
	case $how in
	intercept) detail "- interception: $(grep -h '^block\|^verdict' "$W/logs/intercept.out" | tr '\n' ' ')" ;;
	freeze)
		detail "- freezer ($cgroot): $(tr '\n' ' ' <"$W/logs/freeze.out")"
		"$BIN" freezer remove --root "$cgroot" --dir "$cg" >>"$W/logs/freeze.out" 2>&1
		;;
	esac
}

# freezer_create PID: a cgroup of its own for the process, under the
# machine's cgroup mount, or a cgroup2 mount of our own where there is none
# (unmounted by teardown). Prints "<cgroup root> <directory>"; nothing when
# cgroups do not allow it ($W/logs/cgroup.out says why).
freezer_create() {
	local root=$CGROUP_ROOT dir
	if ! "$BIN" freezer create --root "$root" --name qgpu-gpucheck-offline --pid "$1" >"$W/logs/cgroup.out" 2>&1; then
		root=$W/cgroup2
		mkdir -p "$root"
		if mount -t cgroup2 none "$root" 2>>"$W/logs/cgroup.out"; then
			echo "$root" >>"$W/mounted"
			"$BIN" freezer create --root "$root" --name qgpu-gpucheck-offline --pid "$1" >>"$W/logs/cgroup.out" 2>&1
		fi
	fi
	dir=$(sed -n 's/^freezer .* dir=//p' "$W/logs/cgroup.out" | tail -n 1)
	[ -n "$dir" ] || return 1
	echo "$dir" >>"$W/cgroups"
	echo "$root $dir"
}

step_mps() {
	local mode
	mode=$(timeout 15 nvidia-smi --query-gpu=compute_mode --format=csv,noheader -i 0 2>/dev/null)
	detail "- compute mode: ${mode:-unknown}; nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo none)"
	result SKIP "the agent's MPS control daemon sets EXCLUSIVE_PROCESS on each card (docs/backend-mps.md) and runs a daemon; this check never changes the compute mode nor leaves a daemon"
}

step_teardown() {
	end_pids
	local d
	if [ -s "$W/cgroups" ]; then
		while read -r d; do
			[ -d "$d" ] && { echo 0 >"$d/cgroup.freeze" || echo THAWED >"$d/freezer.state"; } 2>/dev/null
			rmdir "$d" 2>/dev/null
		done <"$W/cgroups"
	fi
	if [ -s "$W/mounted" ]; then
		while read -r d; do umount "$d" 2>/dev/null; done <"$W/mounted"
	fi
	if [ -s "$W/created" ]; then
		while read -r d; do
			if [ -f "$d" ] && [ ! -s "$d" ]; then rm -f "$d"; elif [ -d "$d" ]; then rm -rf "$d"; fi
		done < <(sort -ru "$W/created")
	fi
	# Left over: a program of the payload or of the build, or one of the
	# programs' timeouts (the steps' own are `timeout -k`, without --foreground).
	local left=() pid exe
	for pid in /proc/[0-9]*; do
		pid=${pid#/proc/}
		exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
		case $exe in
		"$W"/* | "$HERE"/*) left+=("$pid") ;;
		*/timeout) tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '--foreground' && left+=("$pid") ;;
		esac
	done
	SUBCHECK=teardown/processes
	if [ ${#left[@]} -eq 0 ]; then
		result PASS "no process of this run left"
	else
		result FAIL "left running: ${left[*]}"
	fi
	SUBCHECK=teardown/card-settings
	if [ -s "$W/settings-before.csv" ]; then
		card_settings >"$W/settings-after.csv"
		if diff "$W/settings-before.csv" "$W/settings-after.csv" >"$W/settings.diff"; then
			result PASS "compute mode, MIG, persistence, ECC, application clocks and power limit as found"
		else
			detail_file "$W/settings.diff"
			result FAIL "the card's settings changed (diff in the report)"
		fi
		timeout 15 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$W/apps-after.csv" 2>&1
		detail_file "$W/apps-after.csv" 10
	fi
}

# ---- the driver ----------------------------------------------------------

# run_step NAME BUDGET: the step in a child of its own, under its budget
# trimmed to what is left (teardown keeps its reserve).
run_step() {
	local name=$1 budget=$2 left rc rows
	left=$((DEADLINE - $(date +%s)))
	[ "$name" = teardown ] || left=$((left - TEARDOWN_RESERVE))
	if [ "$left" -lt 10 ]; then
		printf '%s\t%s\t%s\n' "$name" SKIP "not enough of the budget left ($left s)" >>"$W/results.tsv"
		return
	fi
	[ "$budget" -gt "$left" ] && budget=$left
	rows=$(rows_of "$name")
	echo "== $name (up to $budget s, $(($(date +%s) - START)) s in)"
	timeout -k 5 "$budget" bash "$SELF" --step "$name" 2>&1 | tee -a "$OUTDIR/steps.log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		printf '%s\t%s\t%s\n' "$name" FAIL "timed out after $budget s (what it had finished is above)" >>"$W/results.tsv"
	elif [ "$(rows_of "$name")" -eq "$rows" ]; then
		printf '%s\t%s\t%s\n' "$name" FAIL "exited $rc without a result" >>"$W/results.tsv"
	fi
	write_report
}

# rows_of STEP: how many results the step has recorded (the build step
# records from the background meanwhile).
rows_of() { cut -f1 "$W/results.tsv" | grep -c -E "^$1(/|\$)"; }

# child: one step, with the card's facts setup found.
child() {
	STEP_NAME=$1
	# shellcheck source=/dev/null # written by setup
	[ -f "$W/card.env" ] && . "$W/card.env"
	if [ "$STEP_NAME" != setup ] && [ "$STEP_NAME" != teardown ] && [ -z "${CARD_UUID:-}" ]; then
		result SKIP "no card (setup failed)"
		exit 0
	fi
	[ "$STEP_NAME" = teardown ] || trap end_pids EXIT
	"step_$STEP_NAME"
}

selected() {
	[ -z "$ONLY" ] && return 0
	case ",$ONLY," in *",$1,"*) return 0 ;; esac
	return 1
}

main() {
	local s name budget build_pid=
	fresh_work
	mkdir -p "$W/logs" "$W/details" "$W/slices" "$W/hami/lib" "$OUTDIR" || die "cannot create $W or $OUTDIR"
	: >"$W/results.tsv"
	: >"$OUTDIR/steps.log"
	trap 'bash "$SELF" --step teardown >>"$OUTDIR/steps.log" 2>&1; write_report; exit 130' INT TERM
	echo "run.sh: budget $BUDGET s, report in $OUTDIR/report.md"
	for s in "${STEPS[@]}"; do
		read -r name budget _ <<<"$s"
		case $name in
		setup | teardown) run_step "$name" "$budget" ;;
		build)
			# In the background: inventory and cdi need none of it.
			(run_step build "$budget" >"$W/logs/build-step.out" 2>&1) &
			build_pid=$!
			;;
		*)
			if [ -n "$build_pid" ] && [ "$name" != inventory ] && [ "$name" != cdi ]; then
				wait "$build_pid"
				cat "$W/logs/build-step.out"
				build_pid=
			fi
			if selected "$name"; then
				run_step "$name" "$budget"
			else
				printf '%s\t%s\t%s\n' "$name" SKIP "not selected (--only $ONLY)" >>"$W/results.tsv"
			fi
			;;
		esac
	done
	write_report
	(cd "$W" && tar -czf "$OUTDIR/raw.tar.gz" logs slices details results.tsv card.env settings-*.csv colocation 2>/dev/null)
	echo
	sed -n '/^| step/,/^$/p' "$OUTDIR/report.md"
	echo "run.sh: $(($(date +%s) - START)) s; report: $OUTDIR/report.md"
}

# fresh_work: an empty work directory; an existing one only if a run made it.
fresh_work() {
	if [ -e "$W" ]; then
		[ -f "$W/.qgpu-gpucheck" ] || die "$W exists and is not a work directory of run.sh: choose another --work"
		rm -rf "$W"
	fi
	if ! mkdir -p "$W" || ! : >"$W/.qgpu-gpucheck"; then die "cannot create $W"; fi
}

# ---- dry run: no GPU call --------------------------------------------------

dry() {
	local problems=0 f s name budget total=0
	fresh_work
	mkdir -p "$W/details" "$W/slices" "$W/hami/lib" "$OUTDIR" && : >"$W/results.tsv"
	STEP_NAME=setup
	echo "run.sh --dry: payload $HERE, work $W, report $OUTDIR/report.md, budget $BUDGET s"
	echo "steps (budget s: what it measures):"
	for s in "${STEPS[@]}"; do
		read -r name budget _ <<<"$s"
		total=$((total + budget))
		printf '  %-10s %4s s  %s%s\n' "$name" "$budget" "${s#* * }" "$(selected "$name" || [ "$name" = setup ] || [ "$name" = build ] || [ "$name" = teardown ] || echo ' (not selected)')"
	done
	echo "  ceilings add up to $total s; the run stops starting steps at $BUDGET s less teardown's $TEARDOWN_RESERVE s"
	for f in "$BIN" "$HERE/MANIFEST" "$HERE/src/spin.cu" "$HERE/src/memcap.cu" "$HERE/src/online.cu" "$HERE/src/gpucheck.cuh"; do
		[ -e "$f" ] || { echo "missing: $f"; problems=$((problems + 1)); }
	done
	if [ -f "$HERE/hami-core/src/multiprocess/multiprocess_memory_limit.h" ]; then
		echo "HAMi-core source: $HERE/hami-core ($(sed -n 's/^hami-core //p' "$HERE/MANIFEST"))"
	else
		echo "HAMi-core source: missing (the build step will fail: make gpu-check needs HAMI_CORE_TARBALL, docs/real-card.md)"
		problems=$((problems + 1))
	fi
	"$BIN" >/dev/null 2>&1
	[ $? -eq 2 ] || { echo "qgpu-gpucheck does not run here"; problems=$((problems + 1)); }
	# The slice path end to end, as the steps call it, with a stand-in
	# library: the backend's answer, CDI delivery over the pod's env, both
	# views; then what enter would mount.
	: >"$W/hami/lib/libvgpu.so"
	CARD_UUID=GPU-00000000-0000-0000-0000-000000000000 CARD_INDEX=0 MODE=namespace LOCK_DIR=$W/lock
	local made=0
	slice mem-slice && slice mem-escape "${ATTACK[@]}" && slice mem-envvar --delivery envvar "${ATTACK[@]}" &&
		slice sm-older-agent --drop-agent-var 'CUDA_DEVICE_SM_LIMIT_*' --pod-env CUDA_DEVICE_SM_LIMIT_0=100 &&
		slice offline-int --class offline && made=1
	for f in "$W"/slices/*.view; do
		echo "slice $(basename "$f" .view): $(grep -c '^env ' "$f") variables, $(grep -c '^mount ' "$f") mounts; $(grep -E '^env (CUDA_DEVICE_(SM|MEMORY)_LIMIT_0|GPU_CORE_UTILIZATION_POLICY)=' "$f" | cut -d' ' -f2 | tr '\n' ' ')"
	done
	if [ "$made" -eq 0 ]; then
		echo "a slice failed: $(cat "$W/details/setup.md" 2>/dev/null)"
		problems=$((problems + 1))
	fi
	echo "enter mem-slice would mount, then exec with its variables:"
	DRY_MOUNTS=1 bash "$SELF" --enter "$W/slices/mem-slice.view" -- true | sed 's/^/  /'
	if [ "$problems" -eq 0 ]; then
		result PASS "payload complete, qgpu-gpucheck runs, the slices' env and mounts come from the agent's backend"
	else
		result FAIL "$problems problem(s) above"
	fi
	write_report
	echo "run.sh --dry: $problems problem(s); no GPU call made"
	[ "$problems" -eq 0 ]
}

# ---- command line ----------------------------------------------------------

case "${1:-}" in
--enter)
	shift
	enter "$@"
	;;
--step)
	# A child of run_step: the parent's settings come through the environment.
	child "$2"
	;;
*)
	DRY='' ONLY='' BUDGET=360 W=/tmp/qgpu-gpucheck OUTDIR=${OUT:-$PWD/_output/gpu-check-report}
	# For trying run.sh on a machine without a card, with stand-in tools on
	# PATH (docs/real-card.md): where the cgroups and the lock directory are.
	CGROUP_ROOT=${QGPU_GPUCHECK_CGROUP_ROOT:-/sys/fs/cgroup} LOCK_DIR=${QGPU_GPUCHECK_LOCK_DIR:-/tmp/vgpulock}
	while [ $# -gt 0 ]; do
		case $1 in
		--dry) DRY=1 ;;
		--out) OUTDIR=$2 && shift ;;
		--budget) BUDGET=$2 && shift ;;
		--only) ONLY=$2 && shift ;;
		--work) W=$2 && shift ;;
		-h | --help) sed -n '2,/^set -u/p' "$SELF" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
		*) die "unknown argument $1 (--help)" ;;
		esac
		shift
	done
	case $BUDGET in '' | *[!0-9]*) die "--budget $BUDGET: seconds" ;; esac
	OUTDIR=$(readlink -m "$OUTDIR")/gpu-check W=$(readlink -m "$W")
	case "$HERE$W$OUTDIR" in *[[:space:]]*) die "paths with white space: $HERE $W $OUTDIR" ;; esac
	START=$(date +%s) DEADLINE=$(($(date +%s) + BUDGET)) MODE=preload
	export W OUTDIR BUDGET START DEADLINE DRY ONLY TEARDOWN_RESERVE LOCK_DIR CGROUP_ROOT
	if [ -n "$DRY" ]; then
		dry
	else
		[ "$(id -u)" -eq 0 ] || die "run as root (mount namespaces, cgroups): the device machine's commands do"
		main
	fi
	;;
esac
