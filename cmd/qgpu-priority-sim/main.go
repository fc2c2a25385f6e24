// Command qgpu-priority-sim measures the online/offline priority controller
// in simulation: a fake NVML whose online process turns busy and idle, and a
// temporary cgroup tree (v1 and v2). It prints time-to-suspend and
// time-to-resume percentiles, end to end through the cgroup files. No GPU is
// involved: see agent/priority/README.md for what this does and does not show.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
)

func main() {
	cycles := flag.Int("cycles", 50, "busy/idle cycles per cgroup layout")
	poll := flag.Duration("poll", priority.DefaultPoll, "controller poll interval")
	idle := flag.Duration("idle", priority.DefaultIdle, "idle time before offline pods resume")
	busyFor := flag.Duration("busy", 30*time.Millisecond, "how long the online process stays busy per cycle")
	idleFor := flag.Duration("idle-phase", 150*time.Millisecond, "how long it stays idle after the offline pods resumed")
	flag.Parse()
	klog.SetOutput(os.Stderr)
	klog.LogToStderr(false) // keep the report readable
	if err := run(*cycles, *poll, *idle, *busyFor, *idleFor); err != nil {
		fmt.Fprintln(os.Stderr, "qgpu-priority-sim:", err)
		os.Exit(1)
	}
}

func run(cycles int, poll, idle, busyFor, idleFor time.Duration) error {
	fmt.Printf("poll=%s idle=%s cycles=%d busy=%s idle-phase=%s\n", poll, idle, cycles, busyFor, idleFor)
	for _, l := range []struct {
		name    string
		version cgroup.Version
		systemd bool
	}{{"cgroup v2, systemd driver", cgroup.V2, true}, {"cgroup v1, cgroupfs driver", cgroup.V1, false}} {
		dir, err := os.MkdirTemp("", "qgpu-priority-sim-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		s, err := priority.NewSim(dir, l.version, l.systemd)
		if err != nil {
			return err
		}
		cfg, err := s.Config(poll, idle)
		if err != nil {
			return err
		}
		m, err := priority.Measure(context.Background(), s, cfg, cycles, busyFor, idleFor)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		fmt.Printf("%s\n  suspend (online busy → both offline cgroups frozen): %s\n", l.name, priority.Summary(m.Suspend))
		fmt.Printf("  resume  (online idle → both offline cgroups thawed): %s\n", priority.Summary(m.Resume))
		fmt.Printf("  frozen samples while online idle: %d; general pod touched: %v\n", m.FrozenWhileIdle, m.GeneralTouched)
	}
	return nil
}
