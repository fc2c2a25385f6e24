package hamicore

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const cardA, cardB = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"

// node is a region root, a /proc and the lists the keeper reads.
type node struct {
	root, proc string
	grants     []store.Grant
	pods       []*v1.Pod
	policy     protocol.Policy
	now        time.Time
	listErr    error
}

func newNode(t *testing.T) *node {
	n := &node{root: filepath.Join(t.TempDir(), "regions"), proc: t.TempDir(), policy: protocol.PolicyBurstShare,
		now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	if err := os.MkdirAll(n.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) keeper(t *testing.T) *Keeper {
	t.Helper()
	k, err := New(Config{Root: n.root, ProcRoot: n.proc, MaxRemovals: 2, Grace: time.Minute,
		Grants: func() ([]store.Grant, error) { return n.grants, n.listErr },
		Pods:   func() ([]*v1.Pod, error) { return n.pods, nil },
		Policy: func() protocol.Policy { return n.policy },
		Now:    func() time.Time { return n.now }})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// container grants uid's container c the cards and, with a host PID, writes
// the region its library would write (running: the PID is in /proc).
func (n *node) container(t *testing.T, uid string, hostPID int32, running bool, im hamiregion.Image, cards ...string) string {
	t.Helper()
	g := store.Grant{PodUID: uid, Container: "c", Resource: protocol.ResourceMemory}
	for _, c := range cards {
		g.Slices = append(g.Slices, protocol.Slice{UUID: c, MemoryGiB: 4, Cores: 30})
	}
	n.grants = append(n.grants, g, store.Grant{PodUID: uid, Container: "c", Resource: protocol.ResourceCore, Slices: g.Slices})
	dir, err := hamiregion.PrepareContainerDir(n.root, uid, "c")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, hamiregion.FileName)
	if hostPID == 0 {
		return path // CUDA not started: no region
	}
	im.UUIDs = cards
	im.Procs = []hamiregion.Proc{{PID: 1, HostPID: hostPID, Status: 1}}
	if err := im.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if running {
		if err := os.MkdirAll(filepath.Join(n.proc, strconv.Itoa(int(hostPID))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func switchOf(t *testing.T, path string) int32 {
	t.Helper()
	s, err := hamiregion.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s.UtilizationSwitch
}

// capped is a region as the library writes it at start under burst-share:
// an SM limit and the switch on.
var capped = hamiregion.Image{SMLimit: []uint64{30, 30}, UtilizationSwitch: 1}

func TestBurst(t *testing.T) {
	type ctr struct {
		pid     int32 // 0: no region yet
		running bool
		im      hamiregion.Image
		cards   []string
	}
	tests := []struct {
		name        string
		policy      protocol.Policy
		ctrs        []ctr
		wantSwitch  []int32 // per container with a region, in order
		wantChanged int
	}{
		{"alone: uncapped", protocol.PolicyBurstShare, []ctr{{10, true, capped, []string{cardA}}}, []int32{0}, 1},
		{"two on a card: both capped", protocol.PolicyBurstShare,
			[]ctr{{10, true, capped, []string{cardA}}, {11, true, withSwitch(capped, 0), []string{cardA}}}, []int32{1, 1}, 1},
		{"different cards: both uncapped", protocol.PolicyBurstShare,
			[]ctr{{10, true, capped, []string{cardA}}, {11, true, capped, []string{cardB}}}, []int32{0, 0}, 2},
		{"the neighbour's processes exited", protocol.PolicyBurstShare,
			[]ctr{{10, true, capped, []string{cardA}}, {11, false, capped, []string{cardA}}}, []int32{0, 1}, 1},
		{"the neighbour has not started CUDA", protocol.PolicyBurstShare,
			[]ctr{{10, true, capped, []string{cardA}}, {0, false, capped, []string{cardA}}}, []int32{0}, 1},
		{"a two-card container shares one card", protocol.PolicyBurstShare,
			[]ctr{{10, true, capped, []string{cardA, cardB}}, {11, true, capped, []string{cardB}}}, []int32{1, 1}, 0},
		{"blocked by the priority controller: left alone", protocol.PolicyBurstShare,
			[]ctr{{10, true, withRecent(capped, hamiregion.RecentKernelBlocked), []string{cardA}}}, []int32{1}, 0},
		{"no SM limit: nothing to switch", protocol.PolicyBurstShare,
			[]ctr{{10, true, hamiregion.Image{SMLimit: []uint64{100}, UtilizationSwitch: 1}, []string{cardA}}}, []int32{1}, 0},
		{"fixed-share: untouched", protocol.PolicyFixedShare, []ctr{{10, true, capped, []string{cardA}}}, []int32{1}, 0},
		{"best-effort: untouched", protocol.PolicyBestEffort, []ctr{{10, true, withSwitch(capped, 0), []string{cardA}}}, []int32{0}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.policy = tc.policy
			var paths []string
			for i, c := range tc.ctrs {
				p := n.container(t, "uid-"+strconv.Itoa(i), c.pid, c.running, c.im, c.cards...)
				if c.pid != 0 {
					paths = append(paths, p)
				}
			}
			k := n.keeper(t)
			changed, err := k.Burst()
			if err != nil || changed != tc.wantChanged {
				t.Errorf("changed %d, %v; want %d", changed, err, tc.wantChanged)
			}
			var got []int32
			for _, p := range paths {
				got = append(got, switchOf(t, p))
			}
			if diff := cmp.Diff(tc.wantSwitch, got); diff != "" {
				t.Errorf("switches (-want +got):\n%s", diff)
			}
			if again, err := k.Burst(); again != 0 || err != nil {
				t.Errorf("a second pass changed %d, %v", again, err)
			}
		})
	}
}

// TestBurstFollowsNeighbours: the switch goes on when a neighbour starts
// and off again when it ends.
func TestBurstFollowsNeighbours(t *testing.T) {
	n := newNode(t)
	k := n.keeper(t)
	alone := n.container(t, "uid-off", 10, true, capped, cardA)
	step := func(want int32) {
		t.Helper()
		if _, err := k.Burst(); err != nil {
			t.Fatal(err)
		}
		if got := switchOf(t, alone); got != want {
			t.Errorf("switch %d, want %d", got, want)
		}
	}
	step(0)
	n.container(t, "uid-on", 11, true, capped, cardA)
	step(1)
	if err := os.Remove(filepath.Join(n.proc, "11")); err != nil {
		t.Fatal(err)
	}
	step(0)
}

func TestBurstErrors(t *testing.T) {
	n := newNode(t)
	n.listErr = errors.New("store closed")
	if _, err := n.keeper(t).Burst(); err == nil {
		t.Error("grants error: none returned")
	}
	n.listErr = nil
	path := n.container(t, "uid-0", 10, true, capped, cardA)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// A link the container planted to another container's region is not followed.
	other := n.container(t, "uid-1", 0, false, capped, cardB)
	if err := (hamiregion.Image{UUIDs: []string{cardB}, SMLimit: []uint64{30}, UtilizationSwitch: 1,
		Procs: []hamiregion.Proc{{PID: 1, HostPID: 10, Status: 1}}}).WriteFile(other); err != nil {
		t.Fatal(err)
	}
	n.grants = n.grants[:2] // only uid-0 is granted
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	if changed, err := n.keeper(t).Burst(); changed != 0 || err != nil {
		t.Errorf("through a link: changed %d, %v", changed, err)
	}
	if got := switchOf(t, other); got != 1 {
		t.Errorf("the linked region's switch was turned to %d", got)
	}
}

func withSwitch(im hamiregion.Image, v int32) hamiregion.Image { im.UtilizationSwitch = v; return im }
func withRecent(im hamiregion.Image, v int32) hamiregion.Image { im.RecentKernel = v; return im }

func pod(uid string) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}} }

func TestSweep(t *testing.T) {
	n := newNode(t)
	old := n.now.Add(-time.Hour)
	mk := func(name string, mtime time.Time) {
		t.Helper()
		p := filepath.Join(n.root, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "f"), nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	mk("running_c", old)       // its pod is on the node
	mk("granted_c", old)       // a grant names it (pod not in the cache yet)
	mk("gone1_c", old)         // removed
	mk("gone2_c", old)         // removed
	mk("gone3_c", old)         // over MaxRemovals: removed by the next sweep
	mk("fresh_c", n.now)       // inside the grace period
	mk("not-a-container", old) // not ours: left
	if err := os.WriteFile(filepath.Join(n.root, "ld.so.preload"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.pods = []*v1.Pod{pod("running")}
	n.grants = []store.Grant{{PodUID: "granted", Container: "c", Resource: protocol.ResourceMemory}}
	k := n.keeper(t)
	if removed, err := k.Sweep(); removed != 2 || err != nil {
		t.Fatalf("first sweep removed %d, %v; want 2 (MaxRemovals)", removed, err)
	}
	if removed, err := k.Sweep(); removed != 1 || err != nil {
		t.Fatalf("second sweep removed %d, %v; want 1", removed, err)
	}
	if removed, err := k.Sweep(); removed != 0 || err != nil {
		t.Fatalf("third sweep removed %d, %v", removed, err)
	}
	var left []string
	entries, _ := os.ReadDir(n.root)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"fresh_c", "granted_c", "ld.so.preload", "not-a-container", "running_c"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
	n.listErr = errors.New("store closed")
	n.now = n.now.Add(time.Hour)
	n.pods = nil
	if removed, err := k.Sweep(); removed != 0 || err == nil {
		t.Errorf("with the grants unreadable: removed %d, %v; want nothing removed and an error", removed, err)
	}
}
