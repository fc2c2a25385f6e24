package fakeactivity

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
)

// DefaultEvery is how often Run syncs the grants and the activity file.
const DefaultEvery = 50 * time.Millisecond

// qos is the QoS class of every fake pod cgroup: the store does not keep
// the pods' QoS, and the controller looks in every layout anyway.
const qos = "burstable"

// Node is the simulated node. Create with New, run with Run.
type Node struct {
	NVML   *nvml.Fake
	Tree   *cgroup.FakeTree
	File   string
	Grants func() ([]store.Grant, error)
	// Pods, if set, lists the node's pods: every granted container that has
	// a container ID in its pod's status gets a container cgroup under its
	// pod's, named as containerd names it (the controller freezes those).
	Pods  func() ([]*v1.Pod, error)
	Every time.Duration

	procs    map[proc]string   // fake processes → namespace/pod
	activity map[string]uint32 // namespace/pod → SM %
	stamp    fileStamp
}

// proc is one fake process: a pod's on one card.
type proc struct {
	uid   string
	index int
	pid   uint32
}

// New creates (or reopens) a v2, systemd-driver tree at cgroupRoot and
// procRoot. Both must be scratch directories: New refuses the host's
// /sys and /proc.
func New(fake *nvml.Fake, cgroupRoot, procRoot, file string, grants func() ([]store.Grant, error)) (*Node, error) {
	if err := CheckRoots(cgroupRoot, procRoot); err != nil {
		return nil, err
	}
	tree, err := cgroup.NewFakeTreeAt(cgroupRoot, procRoot, cgroup.V2, true)
	if err != nil {
		return nil, fmt.Errorf("fake cgroup tree: %w", err)
	}
	return &Node{NVML: fake, Tree: tree, File: file, Grants: grants, Every: DefaultEvery,
		procs: map[proc]string{}, activity: map[string]uint32{}}, nil
}

// CheckRoots refuses roots on the host's cgroup or proc file systems.
func CheckRoots(roots ...string) error {
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return err
		}
		if abs == "/" || abs == "/sys" || abs == "/proc" || strings.HasPrefix(abs, "/sys/") || strings.HasPrefix(abs, "/proc/") {
			return fmt.Errorf("fake activity: %s is the host's; point --cgroup-root and --proc-root at scratch directories", abs)
		}
	}
	return nil
}

// PID is the fake process of pod uid on card index: stable across agent
// restarts, and above the kernel's largest pid_max (2^22), so never a real one.
func PID(uid string, index int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", uid, index)
	return 1<<22 + h.Sum32()%(1<<31)
}

// Run syncs every Every until ctx ends.
func (n *Node) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("fake-activity")
	logger.Info("Simulating pod processes and cgroups", "cgroupRoot", n.Tree.CgroupRoot, "procRoot", n.Tree.ProcRoot, "activityFile", n.File)
	t := time.NewTicker(n.Every)
	defer t.Stop()
	var lastErr string
	for {
		if err := n.Sync(logger); err != nil && err.Error() != lastErr {
			logger.Error(err, "Fake activity sync")
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync reads the activity file if it changed, gives every granted pod its
// processes and cgroup, scripts their utilisation, and removes those of
// pods whose grants are gone.
func (n *Node) Sync(logger klog.Logger) error {
	errFile := n.readActivity(logger)
	grants, err := n.Grants()
	if err != nil {
		return errors.Join(errFile, fmt.Errorf("reading grants: %w", err))
	}
	want := map[proc]string{}
	for _, g := range grants {
		for _, s := range g.Slices {
			want[proc{uid: g.PodUID, index: s.Index, pid: PID(g.PodUID, s.Index)}] = g.Namespace + "/" + g.Name
		}
	}
	var errs []error
	for p, key := range want {
		if _, ok := n.procs[p]; !ok {
			if err := n.add(p); err != nil {
				errs = append(errs, err)
				continue
			}
			n.procs[p] = key
		}
		n.NVML.SetProcess(p.index, p.pid, n.activity[key])
	}
	for p := range n.procs {
		if _, ok := want[p]; !ok {
			errs = append(errs, n.remove(p, want))
			delete(n.procs, p)
		}
	}
	errs = append(errs, n.addContainers(grants))
	return errors.Join(append(errs, errFile)...)
}

// addContainers creates the cgroups of the granted containers that have
// an ID, under pod cgroups that exist (unless there already: a restarted
// agent must find a container its predecessor froze still frozen).
func (n *Node) addContainers(grants []store.Grant) error {
	if n.Pods == nil {
		return nil
	}
	pods, err := n.Pods()
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	byUID := map[string]*v1.Pod{}
	for _, p := range pods {
		byUID[string(p.UID)] = p
	}
	var errs []error
	for _, g := range grants {
		pod := byUID[g.PodUID]
		if pod == nil {
			continue
		}
		podDir := n.Tree.PodDir(qos, g.PodUID)
		if _, err := os.Stat(podDir); err != nil {
			continue
		}
		for _, st := range pod.Status.ContainerStatuses {
			id := st.ContainerID
			if i := strings.Index(id, "://"); i >= 0 {
				id = id[i+3:]
			}
			if st.Name != g.Container || id == "" || strings.Contains(id, "/") {
				continue
			}
			if _, err := os.Stat(filepath.Join(podDir, "cri-containerd-"+id+".scope")); err == nil {
				continue
			}
			if _, err := n.Tree.AddContainer(qos, g.PodUID, id); err != nil {
				errs = append(errs, fmt.Errorf("fake cgroup of container %s/%s: %w", g.PodUID, g.Container, err))
			}
		}
	}
	return errors.Join(errs...)
}

// add creates the pod's cgroup (unless it exists: a restarted agent must
// find a pod its predecessor froze still frozen) and the process's /proc entry.
func (n *Node) add(p proc) error {
	freeze := filepath.Join(n.Tree.PodDir(qos, p.uid), "cgroup.freeze")
	if _, err := os.Stat(freeze); os.IsNotExist(err) {
		if _, err := n.Tree.AddPod(qos, p.uid); err != nil {
			return fmt.Errorf("fake cgroup of pod %s: %w", p.uid, err)
		}
	}
	if err := n.Tree.AddProc(p.pid, qos, p.uid); err != nil {
		return fmt.Errorf("fake process of pod %s: %w", p.uid, err)
	}
	return nil
}

// remove ends the process, and the pod's cgroup once it has no process left.
func (n *Node) remove(p proc, want map[proc]string) error {
	n.NVML.RemoveProcess(p.index, p.pid)
	err := n.Tree.RemoveProc(p.pid)
	for q := range want {
		if q.uid == p.uid {
			return err
		}
	}
	return errors.Join(err, n.Tree.RemovePod(qos, p.uid))
}

func (n *Node) readActivity(logger klog.Logger) error {
	st, err := stampOf(n.File)
	if err != nil || st == n.stamp {
		return err
	}
	data, err := os.ReadFile(n.File)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	activity, bad := parseActivity(string(data))
	n.activity, n.stamp = activity, st
	logger.V(2).Info("Activity file read", "pods", activity)
	if len(bad) > 0 {
		return fmt.Errorf("activity file %s: %w", n.File, errors.Join(bad...))
	}
	return nil
}
