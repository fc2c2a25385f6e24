package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
)

func nowMs() int64 { return time.Now().UnixMilli() }

// openRegion waits until the region at path opens (hamiregion.Open: the
// library's size, a known layout, 1 to 16 devices) and ready says the
// snapshot will do; it returns the last refusal when the wait ends first.
func openRegion(ctx context.Context, path string, wait, poll time.Duration, ready func(hamiregion.Snapshot) string) (*hamiregion.File, hamiregion.Snapshot, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := hamiregion.Open(path)
		if err == nil {
			s, rerr := f.Read()
			switch {
			case rerr != nil:
				err = rerr
			case ready(s) != "":
				err = errors.New(ready(s))
			default:
				return f, s, nil
			}
			f.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, hamiregion.Snapshot{}, fmt.Errorf("after %s: %w", wait, err)
		}
		time.Sleep(poll)
	}
}

func hostPIDsReady(s hamiregion.Snapshot) string {
	if len(s.Procs) == 0 {
		return "no process registered yet"
	}
	if !s.HostPIDsKnown() {
		return "a process has no host PID yet"
	}
	return ""
}

func describeSnapshot(w io.Writer, path string, s hamiregion.Snapshot) {
	fmt.Fprintf(w, "region %s: layout %s, %d device(s)\n", path, s.Version, len(s.UUIDs))
	for i, u := range s.UUIDs {
		fmt.Fprintf(w, "  ordinal %d: %s, sm_limit %d\n", i, u, s.SMLimit[i])
	}
	for _, p := range s.Procs {
		fmt.Fprintf(w, "  process pid %d host pid %d status %d: memory %d MiB, sm util %d %% (ordinal 0)\n",
			p.PID, p.HostPID, p.Status, p.MemoryUsed[0]>>20, p.SMUtil[0])
	}
	fmt.Fprintf(w, "  utilization_switch %d recent_kernel %d priority %d last_kernel_time %d\n",
		s.UtilizationSwitch, s.RecentKernel, s.Priority, s.LastKernelTime)
	fmt.Fprintf(w, "  CanThrottle %v HostPIDsKnown %v\n", s.CanThrottle(), s.HostPIDsKnown())
}

// judgeRegion: the region the real library wrote for the slice names the
// card and the SM limit the agent set, and holds the process with its host
// PID (no PID namespace here, so the host PID is the PID) and the memory
// it uses.
func judgeRegion(s hamiregion.Snapshot, uuid string, smLimit int64, pid int32) verdict {
	var problems []string
	if uuid != "" && (len(s.UUIDs) == 0 || s.UUIDs[0] != uuid) {
		problems = append(problems, fmt.Sprintf("ordinal 0 is %v, want %s", s.UUIDs, uuid))
	}
	if smLimit >= 0 && (len(s.SMLimit) == 0 || int64(s.SMLimit[0]) != smLimit) {
		problems = append(problems, fmt.Sprintf("sm_limit %v, want %d", s.SMLimit, smLimit))
	}
	var found *hamiregion.Proc
	for i := range s.Procs {
		if s.Procs[i].PID == pid {
			found = &s.Procs[i]
		}
	}
	switch {
	case pid == 0:
	case found == nil:
		problems = append(problems, fmt.Sprintf("no process slot for pid %d", pid))
	case found.HostPID != pid:
		problems = append(problems, fmt.Sprintf("pid %d has host pid %d, want %d", pid, found.HostPID, pid))
	case found.MemoryUsed[0] == 0:
		problems = append(problems, fmt.Sprintf("pid %d uses no memory on ordinal 0", pid))
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	return pass("layout %s, the card and sm_limit %d as the agent set them, %d process(es) with host PIDs", s.Version, s.SMLimit[0], len(s.Procs))
}

func runRegion(args []string, stdout io.Writer) (verdict, error) {
	fs := flag.NewFlagSet("region", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("path", "", "the region file on the host (<region root>/<pod UID>_<container>/cudevshr.cache)")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for the library to create it and register the process")
	uuid := fs.String("uuid", "", "the card's UUID, expected at ordinal 0")
	smLimit := fs.Int64("sm-limit", -1, "the expected sm_limit of ordinal 0 (-1: not checked)")
	pid := fs.Int("pid", 0, "a process expected in the region (0: not checked)")
	if err := fs.Parse(args); err != nil {
		return verdict{}, err
	}
	ready := func(s hamiregion.Snapshot) string {
		if msg := hostPIDsReady(s); msg != "" {
			return msg
		}
		for _, p := range s.Procs {
			if *pid == 0 || p.PID == int32(*pid) {
				return ""
			}
		}
		return fmt.Sprintf("pid %d not registered yet", *pid)
	}
	f, s, err := openRegion(context.Background(), *path, *wait, 100*time.Millisecond, ready)
	if err != nil {
		return fail("the agent's reader did not take the region: %v", err), nil
	}
	defer f.Close()
	if fi, err := os.Stat(*path); err == nil {
		fmt.Fprintf(stdout, "file %d bytes (hamiregion.FileSize %d)\n", fi.Size(), hamiregion.FileSize)
	}
	describeSnapshot(stdout, *path, s)
	return judgeRegion(s, *uuid, *smLimit, int32(*pid)), nil
}

// blocker holds a region's launches back as the priority controller does
// (agent/priority/regions.go, block): recent_kernel -1, and the
// utilization switch on while blocked (the library checks the block only
// with its rate limiter running), re-asserted every poll because the
// library's own write of a launch can overwrite it; on release
// recent_kernel 0 and the switch the controller found.
type blocker struct {
	f           *hamiregion.File
	savedSwitch int32 // -1: untouched
	overwritten int   // polls that found the block gone
}

func (b *blocker) hold() error {
	s, err := b.f.Read()
	if err != nil {
		return err
	}
	if s.RecentKernel != hamiregion.RecentKernelBlocked {
		if err := b.f.SetRecentKernel(hamiregion.RecentKernelBlocked); err != nil {
			return err
		}
		b.overwritten++
	}
	if s.UtilizationSwitch != 1 {
		b.savedSwitch = s.UtilizationSwitch
		return b.f.SetUtilizationSwitch(1)
	}
	return nil
}

func (b *blocker) release() error {
	s, err := b.f.Read()
	if err != nil {
		return err
	}
	if s.RecentKernel == hamiregion.RecentKernelBlocked {
		err = b.f.SetRecentKernel(0)
	}
	if err == nil && b.savedSwitch >= 0 {
		err = b.f.SetUtilizationSwitch(b.savedSwitch)
		b.savedSwitch = -1
	}
	return err
}

func runBlock(args []string, stdout io.Writer) (verdict, error) {
	fs := flag.NewFlagSet("block", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("path", "", "the region file on the host")
	hold := fs.Duration("hold", 3*time.Second, "how long the block stands (a TERM or INT releases it sooner)")
	every := fs.Duration("every", 100*time.Millisecond, "the controller's poll: the block is re-asserted this often")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for a region whose processes all have host PIDs (the controller's condition for interception)")
	if err := fs.Parse(args); err != nil {
		return verdict{}, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f, _, err := openRegion(ctx, *path, *wait, 50*time.Millisecond, hostPIDsReady)
	if err != nil {
		return fail("no region to block: %v", err), nil
	}
	defer f.Close()
	b := &blocker{f: f, savedSwitch: -1}
	blocked := nowMs()
	if err := b.hold(); err != nil {
		return fail("writing the block: %v", err), nil
	}
	b.overwritten = 0 // the first write is the block itself
	polls := 0
	t := time.NewTicker(*every)
	end := time.NewTimer(*hold)
	defer t.Stop()
loop:
	for {
		select {
		case <-t.C:
			polls++
			if err := b.hold(); err != nil {
				fmt.Fprintf(stdout, "re-asserting the block: %v\n", err)
			}
		case <-end.C:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	if err := b.release(); err != nil {
		return fail("releasing the block: %v", err), nil
	}
	// A TERM ends the block early, as the controller's release when the
	// online pod goes idle: not a failure.
	fmt.Fprintf(stdout, "block blocked_ms=%d released_ms=%d polls=%d overwritten=%d ended_by_signal=%v\n",
		blocked, nowMs(), polls, b.overwritten, ctx.Err() != nil)
	return verdict{}, nil
}
