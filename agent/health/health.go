// Package health answers the agent's liveness and readiness probes: a list
// of named checks, each an error or nil, served as /livez and /readyz in the
// format of the Kubernetes components' endpoints.
//
// Not k8s.io/apiserver/pkg/server/healthz, whose format this copies: its
// handler answers a failed check with "[-]<name> failed: reason withheld"
// (healthz.go:295 of v0.34.10) and sends the reason only to the log at
// klog V(2) (healthz.go:311), so the probe's body (what kubectl describe
// pod shows for a failed probe) would not say why. docs/agent-health.md.
package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Check is one named condition; Run returns nil when it holds.
type Check struct {
	Name string
	Run  func() error
}

// Handler answers 200 "ok" when every check passes, and 503 with one line
// per check ("[+]name ok" or "[-]name failed: why") when one does not; with
// ?verbose the lines are written on success too.
func Handler(what string, checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Run(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s%s check failed\n", b.String(), what)
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprintf(w, "%s%s check passed\n", b.String(), what)
			return
		}
		fmt.Fprint(w, "ok")
	})
}

// ErrTimeout is wrapped by a check that did not return in time.
var ErrTimeout = errors.New("timed out")

// WithTimeout fails c when it does not return within d: a check that hangs
// (a wedged lock) must fail the probe rather than hold it until the
// kubelet gives up. The hung call is left to finish on its own.
func WithTimeout(c Check, d time.Duration) Check {
	run := c.Run
	c.Run = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- run() }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w after %v", ErrTimeout, d)
		}
	}
	return c
}
