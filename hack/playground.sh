#!/usr/bin/env bash
# Runs bin/qgpu-playground in the background (up), stops it (down) or shows
# online/offline at run time on it (colocation), with
# its pid file, output and state under _output/playground/. `make
# playground-up` / `make playground-down` / `make playground-colocation` call it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=_output/playground
pidfile=$dir/pid

running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

up() {
	if running; then
		echo "The playground is already running (pid $(cat "$pidfile")); make playground-down stops it."
		exit 1
	fi
	mkdir -p "$dir"
	rm -f "$dir/ready"
	# setsid: a session of its own, so the shell's Ctrl-C and hang-up leave it running.
	setsid bin/qgpu-playground --keep --dir="$dir" \
		>"$dir/playground.log" 2>&1 </dev/null &
	echo $! >"$pidfile"
	for _ in $(seq 1 1200); do
		if [[ -f $dir/ready ]]; then
			cat "$dir/playground.log"
			exit 0
		fi
		if ! running; then
			cat "$dir/playground.log"
			rm -f "$pidfile"
			echo "The playground did not come up; logs under $dir."
			exit 1
		fi
		sleep 0.1
	done
	echo "The playground is not ready after 2 minutes; see $dir/playground.log. Stopping it."
	down
	exit 1
}

down() {
	if ! running; then
		rm -f "$pidfile"
		echo "No playground is running."
		return 0
	fi
	pid=$(cat "$pidfile")
	kill -TERM "$pid"
	# It stops the nodes, the agents and the scheduler, then the control plane.
	for _ in $(seq 1 300); do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$pidfile"
			echo "Playground stopped; logs are kept under $dir/cluster."
			return 0
		fi
		sleep 0.1
	done
	echo "The playground (pid $pid) ignored SIGTERM for 30 s; killing it."
	kill -KILL "$pid"
	rm -f "$pidfile"
}

# colocation: on the running playground, the online example turns busy on
# its fake card (the activity file in its node's root dir), the offline pod
# beside it is suspended (kubectl qgpu, the agent's metrics), then idle.
colocation() {
	if ! running; then
		echo "No playground is running; make playground-up starts one."
		exit 1
	fi
	bin/qgpu-playground --colocation --dir="$dir"
}

case "${1:-}" in
up) up ;;
down) down ;;
colocation) colocation ;;
*)
	echo "usage: $0 up|down|colocation" >&2
	exit 2
	;;
esac
