package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// What the e2e program tells about its nodes' own programs: the restarts
// the runners made (supervise.go), and, when a node failed, the ends of its
// logs, so that a run's output alone says why.

// diagnoseLines is how much of each log a diagnosis shows.
const diagnoseLines = 15

// reportRestarts prints every restart of the nodes' containerd and kubelet
// and returns how many count as failures: those after readyAt, when pods
// were running (the zero readyAt: none were).
func reportRestarts(start time.Time, nodes []*node, readyAt time.Time) int {
	failures := 0
	for _, n := range nodes {
		restarts, err := readRestarts(n.dir)
		if err != nil {
			fmt.Printf("FAIL %s: reading its restarts: %v\n", n.name, err)
			failures++
			continue
		}
		for _, r := range restarts {
			at := r.at.Sub(start).Seconds()
			if readyAt.IsZero() || r.at.Before(readyAt) {
				fmt.Printf("note %s: %s exited (%s) at %.1fs, before the nodes were Ready, and was restarted; its log %s ends:\n%s",
					n.name, r.name, r.exit, at, r.log, tail(r.log, 5))
				continue
			}
			failures++
			fmt.Printf("FAIL %s: %s exited (%s) at %.1fs, while pods ran; its log %s ends:\n%s",
				n.name, r.name, r.exit, at, r.log, tail(r.log, diagnoseLines))
		}
	}
	return failures
}

// problemLine is a line of klog at E or F, or of logrus at error or worse.
var problemLine = regexp.MustCompile(`^[EF]\d{4} |level=(error|fatal|panic)`)

// problems returns the last n problem lines of the log at path and its
// last line (a program that exits says why there), indented.
func problems(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")\n"
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	var out []string
	for i, l := range lines {
		if problemLine.MatchString(l) || i == len(lines)-1 {
			out = append(out, "    "+l+"\n")
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "")
}

// diagnose prints the end of the runner's, containerd's and the kubelet's
// logs of every node whose runner has exited.
func diagnose(nodes []*node) {
	for _, n := range nodes {
		if n.runner == nil || !n.exited() {
			continue
		}
		fmt.Printf("%s: its runner exited (%v)\n", n.name, n.runner.err)
		p := filepath.Join(n.dir, "runner.log")
		fmt.Printf("  %s ends:\n%s", p, tail(p, diagnoseLines))
		for _, log := range []string{"containerd.log", "kubelet.log"} {
			p := filepath.Join(n.dir, log)
			fmt.Printf("  %s, its errors and last line:\n%s", p, problems(p, diagnoseLines))
		}
	}
}
