package main

import (
	"fmt"
	"time"
)

// component is one process (or in-process server) of a run: kind is
// scheduler, hollow-node, kubelet, agent or apiserver; name says which
// (a node's name, a scheduler's log file).
type component struct{ kind, name string }

func (c component) String() string {
	if c.name == "" {
		return c.kind
	}
	return c.kind + " " + c.name
}

// finding is a component that failed while the run did not expect it to:
// it exited, or it stopped answering (heartbeats, health endpoint) for
// longer than the bound.
type finding struct {
	c         component
	at        time.Time
	what      string
	silentFor time.Duration // 0 for an exit
	log       string        // its log file, for the tail
}

// allowance is what a fault the run makes on purpose permits a
// component: exits (a kill), and silence until a time (a restart).
type allowance struct {
	exits int
	until time.Time
}

// judge decides from what the watchdog sees which components failed
// unexpectedly. It does no I/O and reads no clock (now is passed in), so
// that its rules are tested on their own (judge_test.go).
type judge struct {
	bound    time.Duration // longest silence not reported
	allow    map[component]*allowance
	lastOK   map[component]time.Time
	lastErr  map[component]string
	reported map[component]bool // silent and reported: not again until it answers
	exits    map[component]int
	findings []finding
}

func newJudge(bound time.Duration) *judge {
	return &judge{bound: bound, allow: map[component]*allowance{}, lastOK: map[component]time.Time{},
		lastErr: map[component]string{}, reported: map[component]bool{}, exits: map[component]int{}}
}

// watch starts judging c as answering now.
func (j *judge) watch(c component, now time.Time) {
	if _, ok := j.lastOK[c]; !ok {
		j.lastOK[c] = now
	}
}

// expect allows c exits more exits, and silence until until (which
// replaces an earlier allowance's: a fault that ended early says so).
func (j *judge) expect(c component, exits int, until time.Time) {
	a := j.allow[c]
	if a == nil {
		a = &allowance{}
		j.allow[c] = a
	}
	a.exits += exits
	a.until = until
}

// exited records an exit of c with its status and log file.
func (j *judge) exited(c component, how, log string, now time.Time) {
	j.exits[c]++
	if a := j.allow[c]; a != nil && a.exits > 0 {
		a.exits--
		return
	}
	j.reported[c] = true
	j.findings = append(j.findings, finding{c: c, at: now, what: "exited (" + how + ")", log: log})
}

// answered records that c answered (a heartbeat renewed, a health check
// passed).
func (j *judge) answered(c component, now time.Time) {
	j.lastOK[c] = now
	delete(j.reported, c)
}

// silent records that c did not answer now (err says how); past the bound
// and any allowance, it is reported once until it answers again.
func (j *judge) silent(c component, err string, log string, now time.Time) {
	j.lastErr[c] = err
	last, ok := j.lastOK[c]
	if !ok {
		j.lastOK[c], last = now, now
	}
	deadline := last.Add(j.bound)
	if a := j.allow[c]; a != nil && a.until.After(deadline) {
		deadline = a.until
	}
	if !now.After(deadline) || j.reported[c] {
		return
	}
	j.reported[c] = true
	silent := now.Sub(last).Round(100 * time.Millisecond)
	j.findings = append(j.findings, finding{c: c, at: now, log: log, silentFor: silent,
		what: fmt.Sprintf("not answering for %v (last answer %s; %s)", silent, last.Format("15:04:05.000"), err)})
}
