// Package hamicore is the agent's upkeep of HAMi-core containers between
// Allocate calls: it turns the burst-share switch of their shared regions
// (a container alone on its cards runs uncapped, as HAMi's monitor lets it)
// and removes the region directories of pods that are gone. The hami-core
// backend (agent/enforce) creates those directories; agent/hamiregion reads
// and writes the regions. See docs/backend-hami-core.md.
package hamicore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Defaults of Config.
const (
	DefaultBurstEvery = time.Second
	DefaultSweepEvery = time.Minute
	// DefaultGrace keeps a directory younger than this even when no pod or
	// grant names it yet: Allocate creates it before the grant is stored.
	DefaultGrace = 5 * time.Minute
	// DefaultMaxRemovals bounds the work of one sweep.
	DefaultMaxRemovals = 64
)

// Config is what the upkeep reads.
type Config struct {
	// Root is the region root (--hami-region-root).
	Root string
	// Grants lists the agent's grants: which containers hold which cards.
	Grants func() ([]store.Grant, error)
	// Pods lists the node's pods; a directory of a listed pod is kept.
	Pods func() ([]*v1.Pod, error)
	// Policy is the node's policy; the switch is turned only under burst-share.
	Policy func() protocol.Policy
	// ProcRoot is the host's /proc, to tell live region processes from dead ones.
	ProcRoot string

	BurstEvery, SweepEvery, Grace time.Duration
	MaxRemovals                   int
	Now                           func() time.Time
}

// Keeper runs the upkeep.
type Keeper struct{ cfg Config }

// New checks cfg and fills its defaults.
func New(cfg Config) (*Keeper, error) {
	if cfg.Root == "" || cfg.Grants == nil || cfg.Pods == nil || cfg.Policy == nil {
		return nil, errors.New("hamicore: root, grants, pods and policy are required")
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.BurstEvery <= 0 {
		cfg.BurstEvery = DefaultBurstEvery
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultSweepEvery
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MaxRemovals <= 0 {
		cfg.MaxRemovals = DefaultMaxRemovals
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Keeper{cfg: cfg}, nil
}

// Run turns switches every BurstEvery and sweeps every SweepEvery until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("hami-core")
	burst, sweep := time.NewTicker(k.cfg.BurstEvery), time.NewTicker(k.cfg.SweepEvery)
	defer burst.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-burst.C:
			if changed, err := k.Burst(); err != nil {
				logger.V(2).Info("Turning burst-share switches", "changed", changed, "err", err)
			} else if changed > 0 {
				logger.V(4).Info("Turned burst-share switches", "changed", changed)
			}
		case <-sweep.C:
			if removed, err := k.Sweep(); err != nil {
				logger.Error(err, "Removing region directories of gone pods", "removed", removed)
			} else if removed > 0 {
				logger.V(2).Info("Removed region directories of gone pods", "removed", removed)
			}
		}
	}
}

// alive reports whether a host PID is running.
func (k *Keeper) alive(pid int32) bool {
	_, err := os.Stat(filepath.Join(k.cfg.ProcRoot, strconv.Itoa(int(pid))))
	return err == nil
}

// Sweep removes the directories of containers whose pod is neither on the
// node nor in a grant, once they are older than Grace; at most MaxRemovals
// per call. Files of the root that are not container directories are left.
func (k *Keeper) Sweep() (removed int, err error) {
	entries, err := os.ReadDir(k.cfg.Root)
	if err != nil {
		return 0, fmt.Errorf("hamicore: reading region root: %w", err)
	}
	keep, err := k.knownPods()
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, e := range entries {
		uid, _, ok := hamiregion.ParseContainerDir(e.Name())
		if !ok || !e.IsDir() || keep[uid] {
			continue
		}
		if removed >= k.cfg.MaxRemovals {
			break
		}
		info, err := e.Info()
		if err != nil || k.cfg.Now().Sub(info.ModTime()) < k.cfg.Grace {
			continue
		}
		if err := os.RemoveAll(filepath.Join(k.cfg.Root, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// knownPods is the set of pod UIDs whose directories stay: the node's pods
// and the pods of every grant. An error of either list keeps everything.
func (k *Keeper) knownPods() (map[string]bool, error) {
	pods, err := k.cfg.Pods()
	if err != nil {
		return nil, fmt.Errorf("hamicore: listing pods: %w", err)
	}
	grants, err := k.cfg.Grants()
	if err != nil {
		return nil, fmt.Errorf("hamicore: listing grants: %w", err)
	}
	keep := make(map[string]bool, len(pods)+len(grants))
	for _, p := range pods {
		keep[string(p.UID)] = true
	}
	for _, g := range grants {
		keep[g.PodUID] = true
	}
	return keep, nil
}
