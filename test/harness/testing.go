package harness

import (
	"context"
	"testing"
	"time"
)

// Start starts a control plane for t and stops it when t ends. Components
// started after it (hollow nodes, the scheduler) register their own
// cleanups later, so they stop first and no client outlives the apiserver.
func Start(t testing.TB) *ControlPlane {
	return StartWith(t, ControlPlaneOptions{})
}

// StartWith is Start with options; a nil opts.Logf logs through t.Logf.
func StartWith(t testing.TB, opts ControlPlaneOptions) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	return cp
}
