// Package fakeactivity gives an agent on fake cards (--fake-cards) what its
// priority controller reads on a real node, for the playground and the
// integration tests, where pods run on a fake container runtime and have no
// processes or cgroups: for every pod the agent has granted, one fake
// process per card in the fake NVML (agent/nvml.Fake) and the pod's cgroup
// directory with a freeze file, plus /proc/<pid>/cgroup pointing into it,
// in a directory tree that mimics /sys/fs/cgroup and /proc
// (agent/cgroup.FakeTree). An activity file scripts which pods compute:
//
//	# <namespace>/<pod> busy|idle|<SM percent>
//	default/online-pod busy
//
// A pod not listed (or the file missing) holds a context and computes
// nothing (0%). The file is re-read when it changes. The controller itself
// is the real one: it polls the fake NVML, resolves PIDs through the fake
// /proc and writes the fake freeze files.
package fakeactivity

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// BusyUtil is the SM utilisation of a pod scripted "busy".
const BusyUtil = 90

// parseActivity reads the file's lines into SM utilisation by namespace/pod;
// bad lines are returned as errors and skipped.
func parseActivity(content string) (map[string]uint32, []error) {
	out := map[string]uint32{}
	var errs []error
	sc := bufio.NewScanner(strings.NewReader(content))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || strings.Count(fields[0], "/") != 1 {
			errs = append(errs, fmt.Errorf("line %d %q: want \"<namespace>/<pod> busy|idle|<0-100>\"", n, line))
			continue
		}
		util, err := parseUtil(fields[1])
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		out[fields[0]] = util
	}
	return out, errs
}

func parseUtil(s string) (uint32, error) {
	switch s {
	case "busy":
		return BusyUtil, nil
	case "idle":
		return 0, nil
	}
	v, err := strconv.ParseUint(strings.TrimSuffix(s, "%"), 10, 32)
	if err != nil || v > 100 {
		return 0, fmt.Errorf("activity %q: want busy, idle or a percentage 0-100", s)
	}
	return uint32(v), nil
}

// fileStamp tells whether the activity file changed since the last read.
type fileStamp struct {
	exists  bool
	modTime time.Time
	size    int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return fileStamp{}, nil
	}
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{exists: true, modTime: fi.ModTime(), size: fi.Size()}, nil
}
