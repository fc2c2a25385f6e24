package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The watchdog's bounds. A node's kubelet renews its Lease every quarter
// of leaseSeconds (test/hollownode --node-lease-duration-seconds); a
// Lease older than its duration is what makes a node NotReady. An agent's
// /livez and the apiserver's /readyz may not answer for as long.
const (
	watchEvery    = 500 * time.Millisecond
	leaseSeconds  = 10
	silenceBound  = leaseSeconds * time.Second
	probeTimeout  = 2 * time.Second
	restartWindow = 30 * time.Second // an expected restart must answer again within this
)

// watchdog watches every component of a run from the cluster's start to
// the end-state checks, which stop the nodes: the scheduler processes,
// the hollow node processes, the kubelets' heartbeats (their node Leases),
// the agents (exits the hollow node logs, and their /livez) and the
// in-process apiserver and etcd (/readyz). A component that exits, or
// does not answer for longer than the bound, without a fault of the run
// that allows it (expect), is a violation named with its exit status and
// the last lines of its log.
type watchdog struct {
	e    *env
	http *http.Client

	mu     sync.Mutex
	j      *judge
	logPos map[string]int64 // node → bytes of node.log already read
	seen   map[*harness.Scheduler]bool
	ended  map[string]bool // hollow nodes seen exited
	stop   context.CancelFunc
	done   chan struct{}
}

func (e *env) startWatchdog(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{e: e, http: &http.Client{Timeout: probeTimeout}, j: newJudge(silenceBound),
		logPos: map[string]int64{}, seen: map[*harness.Scheduler]bool{}, ended: map[string]bool{}, stop: cancel, done: make(chan struct{})}
	now := time.Now()
	for _, n := range e.c.Nodes {
		for _, kind := range []string{"hollow-node", "kubelet", "agent"} {
			w.j.watch(component{kind, n.Name}, now)
		}
	}
	w.j.watch(component{kind: "apiserver"}, now)
	e.watch = w
	go w.run(ctx)
}

// expect allows c exits more exits and silence for the next d.
func (w *watchdog) expect(c component, exits int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.j.expect(c, exits, time.Now().Add(d))
}

// expectOutage allows the apiserver and every kubelet's heartbeat (which
// goes through it) to be silent for d.
func (w *watchdog) expectOutage(d time.Duration) {
	w.expect(component{kind: "apiserver"}, 0, d)
	for _, n := range w.e.c.Nodes {
		w.expect(component{"kubelet", n.Name}, 0, d)
	}
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.done)
	for i := 0; ; i++ {
		w.tick(ctx, i)
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchEvery):
		}
	}
}

func (w *watchdog) tick(ctx context.Context, i int) {
	var wg sync.WaitGroup
	for _, n := range w.e.c.Nodes {
		wg.Go(func() { w.checkAgent(ctx, n) })
	}
	if i%4 == 0 {
		wg.Go(func() { w.checkAPIServer(ctx) })
		wg.Go(func() { w.checkLeases(ctx) })
	}
	wg.Wait()
	w.checkProcesses()
}

func (w *watchdog) note(f func(j *judge, now time.Time)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := len(w.j.findings)
	f(w.j, time.Now())
	for _, x := range w.j.findings[before:] {
		w.e.logf("watchdog: %s %s", x.c, x.what)
	}
}

// checkProcesses looks for exited scheduler and hollow node processes and
// for the agent exits the hollow nodes logged since the last look. Only
// the watchdog's goroutine calls it (seen, ended, logPos are its own).
func (w *watchdog) checkProcesses() {
	for _, s := range w.e.schedulersEver() {
		if !s.Exited() || w.seen[s] {
			continue
		}
		w.seen[s] = true
		how := "exit status 0"
		if err := s.ExitErr(); err != nil {
			how = err.Error()
		}
		w.note(func(j *judge, now time.Time) {
			j.exited(component{"scheduler", filepath.Base(s.LogPath)}, how, s.LogPath, now)
		})
	}
	for _, n := range w.e.c.Nodes {
		if done, err := n.Exited(); done && !w.ended[n.Name] {
			w.ended[n.Name] = true
			how := "exit status 0"
			if err != nil {
				how = err.Error()
			}
			w.note(func(j *judge, now time.Time) { j.exited(component{"hollow-node", n.Name}, how, n.LogPath(), now) })
		}
		for _, how := range w.agentExits(n) {
			w.note(func(j *judge, now time.Time) { j.exited(component{"agent", n.Name}, how, n.AgentLogPath(), now) })
		}
	}
}

// agentExits returns the exit statuses of the node's agent that node.log
// shows since the last call: the hollow node logs `"Agent exited" pid=…
// err=…` for each (test/hollownode/agent.go).
func (w *watchdog) agentExits(n *harness.ClusterNode) []string {
	f, err := os.Open(n.LogPath())
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(w.logPos[n.Name], io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	// Only whole lines: the last may still be being written.
	end := bytes.LastIndexByte(b, '\n') + 1
	w.logPos[n.Name] += int64(end)
	var out []string
	for _, line := range strings.Split(string(b[:end]), "\n") {
		if _, rest, ok := strings.Cut(line, `"Agent exited"`); ok {
			_, how, _ := strings.Cut(rest, "err=")
			out = append(out, strings.Trim(how, `"`))
		}
	}
	return out
}

func (w *watchdog) checkAgent(ctx context.Context, n *harness.ClusterNode) {
	c := component{"agent", n.Name}
	err := w.get(ctx, n)
	w.note(func(j *judge, now time.Time) {
		if err == nil {
			j.answered(c, now)
		} else {
			j.silent(c, "/livez: "+err.Error(), n.AgentLogPath(), now)
		}
	})
}

func (w *watchdog) get(ctx context.Context, n *harness.ClusterNode) error {
	addr, err := n.MetricsAddr()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/livez", nil)
	if err != nil {
		return err
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

func (w *watchdog) checkAPIServer(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := w.e.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	w.note(func(j *judge, now time.Time) {
		if err == nil {
			j.answered(component{kind: "apiserver"}, now)
		} else {
			j.silent(component{kind: "apiserver"}, "/readyz: "+err.Error(), "", now)
		}
	})
}

// checkLeases reads the nodes' Leases: a kubelet answers while it renews
// its Lease.
func (w *watchdog) checkLeases(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	leases, err := w.e.cs.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{})
	renewed := map[string]time.Time{}
	if err == nil {
		for _, l := range leases.Items {
			if l.Spec.RenewTime != nil {
				renewed[l.Name] = l.Spec.RenewTime.Time
			}
		}
	}
	w.note(func(j *judge, now time.Time) {
		for _, n := range w.e.c.Nodes {
			c := component{"kubelet", n.Name}
			switch t, ok := renewed[n.Name]; {
			case err != nil:
				j.silent(c, "reading its Lease: "+err.Error(), n.LogPath(), now)
			case !ok:
				j.silent(c, "no Lease", n.LogPath(), now)
			case now.Sub(t) <= silenceBound:
				j.answered(c, t)
			default:
				j.silent(c, "Lease last renewed "+t.Format("15:04:05.000"), n.LogPath(), now)
			}
		}
	})
}

// report stops the watchdog and prints what it found; each finding is a
// violation.
func (w *watchdog) report() int {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.j.findings {
		fmt.Printf("  VIOLATION ComponentFailed %s: %s at %s\n", f.c, f.what, f.at.Format("15:04:05.000"))
		if f.log != "" {
			fmt.Printf("    last lines of %s:\n%s", f.log, indent(lastLines(f.log, 8), "      "))
		}
	}
	fmt.Printf("watchdog: %d components failed unexpectedly (%s)\n", len(w.j.findings), w.exitsSeen())
	return len(w.j.findings)
}

// exitsSeen summarises every exit seen, expected or not.
func (w *watchdog) exitsSeen() string {
	var parts []string
	for c, n := range w.j.exits {
		parts = append(parts, fmt.Sprintf("%s exited %d×", c, n))
	}
	if len(parts) == 0 {
		return "no exits"
	}
	return strings.Join(sortedStrings(parts), ", ")
}

// failures names what the watchdog found about a node's components so far.
func (w *watchdog) failures(node string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, f := range w.j.findings {
		if f.c.name == node {
			out = append(out, f.c.String()+" "+f.what)
		}
	}
	return out
}
