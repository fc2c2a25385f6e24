package allocate

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func newAllocator(t testing.TB, path string, pods PodSource) (*Allocator, *[]*protocol.Assignment) {
	t.Helper()
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var granted []*protocol.Assignment
	a := &Allocator{
		Node: testNode, Store: s, Pods: pods,
		Config: func() (enforce.Backend, protocol.Policy, error) {
			return enforce.Env{}, protocol.PolicyFixedShare, nil
		},
		// The grant writer's patch, as the informer would show it.
		OnPodGranted: func(p *v1.Pod, g *protocol.Assignment) {
			granted = append(granted, g)
			v, err := g.Encode()
			if err != nil {
				t.Fatal(err)
			}
			p.Annotations[protocol.AnnotationGrant] = v
		},
	}
	return a, &granted
}

func TestAllocatorGrantsAndAnnotates(t *testing.T) {
	ctx := context.Background()
	pod := general("g", 0, 4, 30, 1)
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{pod}})

	resp, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": "GPU-1", "QGPU_CARD_INDEX": "1", "QGPU_MEMORY_GIB": "4",
		"QGPU_CLASS": "general", "QGPU_POLICY": "fixed-share",
	}
	if diff := cmp.Diff(want, resp.Envs); diff != "" {
		t.Errorf("memory envs (-want +got):\n%s", diff)
	}
	if len(*granted) != 0 {
		t.Fatalf("grant written before the core call")
	}
	resp, err = a.Allocate(ctx, protocol.ResourceCore, ids("c", 30))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"QGPU_CORES": "30"}, resp.Envs); diff != "" {
		t.Errorf("core envs (-want +got):\n%s", diff)
	}
	if len(*granted) != 1 {
		t.Fatalf("OnPodGranted called %d times, want 1", len(*granted))
	}
	wantGrant, _ := AssignmentOf(pod, testNode)
	if diff := cmp.Diff(wantGrant, (*granted)[0]); diff != "" {
		t.Errorf("grant (-want +got):\n%s", diff)
	}
}

func TestAllocatorRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	pods := &fakePods{cached: []*v1.Pod{general("old", 0, 4, 30, 0), general("young", 1, 4, 30, 1)}}
	a, _ := newAllocator(t, path, pods)
	first, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
	if err != nil {
		t.Fatal(err)
	}
	a.Store.Close()

	// A new agent on the same store: the old pod is taken, the young one is not.
	b, _ := newAllocator(t, path, pods)
	resp, err := b.Allocate(ctx, protocol.ResourceMemory, ids("n", 4))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-1" {
		t.Errorf("after restart got card %s, want the young pod's GPU-1", got)
	}
	// The kubelet repeating the first call gets the same answer.
	again, err := b.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.Envs, again.Envs); diff != "" {
		t.Errorf("repeated call (-first +again):\n%s", diff)
	}
	if _, err := b.Allocate(ctx, protocol.ResourceMemory, ids("o", 4)); !errors.Is(err, ErrNoMatch) {
		t.Errorf("third container: want ErrNoMatch, got %v", err)
	}
}

func TestAllocatorStaleCacheAndStaleRecord(t *testing.T) {
	ctx := context.Background()
	gone := general("gone", 0, 4, 30, 0)
	pods := &fakePods{cached: []*v1.Pod{gone}, fresh: []*v1.Pod{gone}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4)); err != nil {
		t.Fatal(err)
	}
	// The pod is gone: its devices coming back are not a repeated call.
	pods.cached, pods.fresh = nil, nil
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4)); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("devices of a gone pod: want ErrNoMatch, got %v", err)
	}
	// A new pod is bound but not yet in the informer cache, and the kubelet
	// hands it the freed devices.
	pods.fresh = []*v1.Pod{general("new", 3, 4, 30, 1)}
	resp, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-1" {
		t.Errorf("got card %s, want the new pod's GPU-1", got)
	}
	if pods.freshCalls == 0 {
		t.Errorf("the API server was never asked")
	}
}

// The kubelet gives an app container the devices of the init container it
// reuses: equal IDs must not be taken for a repeated call.
func TestAllocatorInitContainerDevicesReused(t *testing.T) {
	ctx := context.Background()
	pod := makePod("p", 0, protocol.ClassGeneral,
		ctr{"init", 4, 30, []protocol.Slice{slice(0, 4, 30)}},
		ctr{"main", 4, 30, []protocol.Slice{slice(1, 4, 30)}})
	pod.Spec.InitContainers, pod.Spec.Containers = pod.Spec.Containers[:1], pod.Spec.Containers[1:]
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{pod}})
	want := []string{"GPU-0", "", "GPU-1", ""}
	for i, r := range []string{protocol.ResourceMemory, protocol.ResourceCore, protocol.ResourceMemory, protocol.ResourceCore} {
		n := 4
		if r == protocol.ResourceCore {
			n = 30
		}
		resp, err := a.Allocate(ctx, r, ids(r, n))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; got != want[i] {
			t.Errorf("call %d: card %q, want %q", i, got, want[i])
		}
	}
	if len(*granted) != 1 || len((*granted)[0].Containers) != 2 {
		t.Errorf("grant: %+v", *granted)
	}
}

func TestAllocatorRefusesEmptyAndBackendErrors(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{general("g", 0, 4, 30, 0)}})
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no devices: want ErrBadRequest, got %v", err)
	}
	a.Config = func() (enforce.Backend, protocol.Policy, error) {
		_, err := enforce.New(enforce.NameHAMiCore, enforce.Options{HAMi: enforce.HAMiOptions{LibDir: t.TempDir(),
			RegionRoot: filepath.Join(t.TempDir(), "r"), LockDir: filepath.Join(t.TempDir(), "l")}})
		return nil, "", err
	}
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4)); !errors.Is(err, enforce.ErrHAMiLibMissing) {
		t.Errorf("missing lib: want ErrHAMiLibMissing, got %v", err)
	}
	if _, ok, _ := a.Store.Get("uid-g", "main", protocol.ResourceMemory); ok {
		t.Errorf("a refused call was recorded")
	}
}

// fakeKubelet is the kubelet's PodResources List: the pods it has taken in.
type fakeKubelet struct {
	pods []string // namespace/name
	err  error
}

func (f *fakeKubelet) List(context.Context) ([]*podresourcesapi.PodResources, error) {
	var out []*podresourcesapi.PodResources
	for _, p := range f.pods {
		ns, name, _ := strings.Cut(p, "/")
		out = append(out, &podresourcesapi.PodResources{Namespace: ns, Name: name})
	}
	return out, f.err
}

// The kubelet admits twins in the order it received them, which need not be
// creation order; the kubelet's own pod list tells the agent which one it is
// admitting. Where the node has no such API, the order rule decides (a
// kubelet that is there and does not answer refuses the call:
// TestKubeletRefusalsRefuseTheCall).
func TestAllocatorAsksTheKubeletWhichTwin(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		kubelet *fakeKubelet
		want    string
	}{
		{"kubelet took in the younger twin", &fakeKubelet{pods: []string{"default/young"}}, "young"},
		{"kubelet took in both (same batch)", &fakeKubelet{pods: []string{"default/young", "default/old"}}, "old"},
		{"kubelet's API absent on the node", &fakeKubelet{err: podresources.ErrUnavailable}, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, young := general("old", 1, 4, 30, 0), general("young", 5, 4, 30, 1)
			a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{old, young}})
			a.Kubelet = tc.kubelet
			resp, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]*v1.Pod{"old": old, "young": young}[tc.want]
			a2, _ := AssignmentOf(want, testNode)
			if got, card := resp.Envs["QGPU_CARD_INDEX"], a2.Containers[0].Slices[0].Index; got != strconv.Itoa(card) {
				t.Fatalf("answered card %s, want %s's card %d", got, tc.want, card)
			}
			g, ok, err := a.Store.ByDevices(protocol.ResourceMemory, ids("m", 4))
			if err != nil || !ok || g.Name != tc.want {
				t.Fatalf("store records %+v (ok %v, err %v), want pod %s", g, ok, err, tc.want)
			}
		})
	}
}

// With Devices set, the memory answer carries the granted card's device node
// and the control nodes, and no other card's; the core answer carries none.
func TestAllocatorPassesDeviceNodes(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		if err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			t.Skipf("cannot create device nodes here: %v", err)
		}
	}
	ctx := context.Background()
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{general("g", 0, 4, 30, 1)}})
	a.Devices = &enforce.DeviceNodes{Root: dir, Minor: func(uuid string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(uuid, "GPU-"))
		return n, err == nil
	}}
	resp, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range resp.Devices {
		got = append(got, d.ContainerPath+"="+d.HostPath+":"+d.Permissions)
	}
	want := []string{"/dev/nvidia1=" + dir + "/nvidia1:rw", "/dev/nvidiactl=" + dir + "/nvidiactl:rw"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memory answer's devices (-want +got):\n%s", diff)
	}
	resp, err = a.Allocate(ctx, protocol.ResourceCore, ids("c", 30))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Devices) != 0 {
		t.Errorf("core answer carries devices: %v", resp.Devices)
	}
}

// An unreadable store refuses every call: the allocator cannot tell which
// containers hold grants, and refuses rather than hand one out twice.
func TestAllocatorUnreadableStoreRefuses(t *testing.T) {
	pod := general("g", 0, 4, 30, 1)
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{pod}})
	if err := a.Store.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("m", 4))
	if !errors.Is(err, ErrStoreUnreadable) || resp != nil {
		t.Errorf("Allocate with an unreadable store: %v, %v; want a refusal (ErrStoreUnreadable)", resp, err)
	}
	if len(*granted) != 0 {
		t.Error("a grant was written")
	}
}
