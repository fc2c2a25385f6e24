package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestJudge plays what the watchdog sees of one component, second by
// second, and checks which findings the judge makes of it.
func TestJudge(t *testing.T) {
	agent := component{"agent", "a100-0"}
	type step struct {
		at     int    // seconds after the start
		expect int    // > 0: allow this many exits and silence for 30 s
		exit   string // an exit with this status
		silent bool   // did not answer (else answered)
	}
	tests := []struct {
		name  string
		steps []step
		want  []string // findings: "<at>s <what prefix>"
	}{
		{name: "answers throughout", steps: []step{{at: 1}, {at: 20}, {at: 40}}},
		{name: "silent within the bound", steps: []step{{at: 1}, {at: 5, silent: true}, {at: 10, silent: true}, {at: 11}}},
		{name: "silent past the bound, reported once", steps: []step{{at: 1}, {at: 5, silent: true}, {at: 12, silent: true}, {at: 15, silent: true}},
			want: []string{"12s silent 11s"}},
		{name: "silent again after answering is reported again",
			steps: []step{{at: 1}, {at: 12, silent: true}, {at: 13}, {at: 30, silent: true}},
			want:  []string{"12s silent 11s", "30s silent 17s"}},
		{name: "an expected kill: its exit and silence allowed",
			steps: []step{{at: 1}, {at: 2, expect: 1}, {at: 2, exit: "signal: killed"}, {at: 20, silent: true}, {at: 25}}},
		{name: "an expected kill that does not come back",
			steps: []step{{at: 1}, {at: 2, expect: 1}, {at: 2, exit: "signal: killed"}, {at: 31, silent: true}, {at: 33, silent: true}},
			want:  []string{"33s silent 32s"}},
		{name: "an exit nobody expected", steps: []step{{at: 1}, {at: 4, exit: "exit status 1"}},
			want: []string{"4s exited (exit status 1)"}},
		{name: "one kill expected, two exits",
			steps: []step{{at: 1}, {at: 2, expect: 1}, {at: 2, exit: "signal: killed"}, {at: 8, exit: "exit status 2"}},
			want:  []string{"8s exited (exit status 2)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			j := newJudge(10 * time.Second)
			j.watch(agent, start)
			for _, s := range tc.steps {
				now := start.Add(time.Duration(s.at) * time.Second)
				switch {
				case s.expect > 0:
					j.expect(agent, s.expect, now.Add(30*time.Second))
				case s.exit != "":
					j.exited(agent, s.exit, "agent.log", now)
				case s.silent:
					j.silent(agent, "connection refused", "agent.log", now)
				default:
					j.answered(agent, now)
				}
			}
			var got []string
			for _, f := range j.findings {
				what := f.what
				if f.silentFor > 0 {
					what = fmt.Sprintf("silent %v", f.silentFor)
				}
				got = append(got, fmt.Sprintf("%v %s", f.at.Sub(start), what))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
