package enforce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// A card's MPS ceiling is the daemon-side limit every client of the card's
// daemon gets: NVIDIA's MPS lets a client's own CUDA_MPS_* variables only
// lower the control daemon's limits, so a client that drops its variables
// (env -u) gets the ceiling, not the whole card. One value serves all the
// card's clients, so it is the largest slice of the containers on the card
// (docs/backend-mps.md#the-daemon-side-ceiling).
//
// The agent writes <root>/<uuid>/ceiling; the control daemon puts it in
// force (set_default_* and, for a running server, set_* <server pid>) and
// then writes the same text to <root>/<uuid>/ceiling.applied.
const (
	MPSCeilingFile        = "ceiling"
	MPSCeilingAppliedFile = "ceiling.applied"
)

// MPSCeiling is a card's daemon-side limits.
type MPSCeiling struct {
	// MemoryMiB is the pinned device memory limit of each client.
	MemoryMiB int64
	// ThreadPercentage is the active thread percentage of each client, 1 to 100.
	ThreadPercentage int64
}

// The file's keys: one line, "memory_mib=<n> active_thread_percentage=<n>".
const (
	ceilingMemoryKey  = "memory_mib"
	ceilingThreadsKey = "active_thread_percentage"
)

// String is the ceiling file's text.
func (c MPSCeiling) String() string {
	return fmt.Sprintf("%s=%d %s=%d\n", ceilingMemoryKey, c.MemoryMiB, ceilingThreadsKey, c.ThreadPercentage)
}

// Validate refuses a ceiling MPS would not take or that limits nothing
// sensible: memory_mib must be positive, active_thread_percentage 1 to 100.
func (c MPSCeiling) Validate() error {
	if c.MemoryMiB <= 0 {
		return fmt.Errorf("%s=%d: must be a positive number of MiB", ceilingMemoryKey, c.MemoryMiB)
	}
	if c.ThreadPercentage < 1 || c.ThreadPercentage > protocol.CoresPerCard {
		return fmt.Errorf("%s=%d: must be 1 to 100", ceilingThreadsKey, c.ThreadPercentage)
	}
	return nil
}

// ParseMPSCeiling reads a ceiling file's text: both keys, each once,
// nothing else.
func ParseMPSCeiling(text string) (MPSCeiling, error) {
	var c MPSCeiling
	seen := map[string]bool{}
	fields := strings.Fields(text)
	for _, f := range fields {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return MPSCeiling{}, fmt.Errorf("%q: want key=value", f)
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return MPSCeiling{}, fmt.Errorf("%s=%q: not an integer", key, value)
		}
		if seen[key] {
			return MPSCeiling{}, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		switch key {
		case ceilingMemoryKey:
			c.MemoryMiB = n
		case ceilingThreadsKey:
			c.ThreadPercentage = n
		default:
			return MPSCeiling{}, fmt.Errorf("unknown key %q (want %s and %s)", key, ceilingMemoryKey, ceilingThreadsKey)
		}
	}
	for _, k := range []string{ceilingMemoryKey, ceilingThreadsKey} {
		if !seen[k] {
			return MPSCeiling{}, fmt.Errorf("%s missing", k)
		}
	}
	return c, c.Validate()
}

// CeilingOf is the ceiling of a card whose containers hold slices: the
// largest memory slice, and the largest core slice under fixed-share and
// burst-share. The thread percentage is 100 under best-effort (no client
// gets a thread limit) and when a slice holds no cores (online pods: they
// hold no core budget and get no thread limit, docs/design.md).
func CeilingOf(slices []protocol.Slice, policy protocol.Policy) (MPSCeiling, error) {
	if len(slices) == 0 {
		return MPSCeiling{}, errors.New("no slices on the card")
	}
	var c MPSCeiling
	for _, s := range slices {
		c.MemoryMiB = max(c.MemoryMiB, s.MemoryGiB*protocol.GiB)
		threads := s.Cores
		if threads <= 0 || policy == protocol.PolicyBestEffort {
			threads = protocol.CoresPerCard
		}
		c.ThreadPercentage = max(c.ThreadPercentage, min(threads, protocol.CoresPerCard))
	}
	return c, c.Validate()
}

// Ceil implements MPSControl: it writes the card's ceiling (atomically:
// the daemon never reads half a file) and waits until the daemon says it
// is in force.
func (r MPSRoot) Ceil(uuid string, c MPSCeiling) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("MPS ceiling of card %s: %w", uuid, err)
	}
	card := filepath.Join(r.Root, uuid)
	want := c.String()
	if readString(filepath.Join(card, MPSCeilingAppliedFile)) == want {
		return nil
	}
	path := filepath.Join(card, MPSCeilingFile)
	if readString(path) != want {
		if err := writeAtomic(path, want); err != nil {
			return fmt.Errorf("writing the MPS ceiling of card %s: %w", uuid, err)
		}
	}
	limit := r.Wait
	if limit <= 0 {
		limit = DefaultMPSWait
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, limit, false,
		func(context.Context) (bool, error) {
			return readString(filepath.Join(card, MPSCeilingAppliedFile)) == want, nil
		})
	if err != nil {
		return fmt.Errorf("%w %s: asked for the ceiling %q in %s, not in force within %s (see the qgpu-mps-control-daemon's log; docs/backend-mps.md)",
			ErrMPSNotReady, uuid, strings.TrimSpace(want), path, limit)
	}
	return nil
}

// writeAtomic writes text to path through a temporary file and a rename.
func writeAtomic(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
