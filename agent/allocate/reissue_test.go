package allocate

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// deviceKubelet is the kubelet's PodResources List with the devices each
// container holds, as the device manager records them after each answer.
// fault, when set, is asked before each List (calls counts from 1): an
// error it returns is the answer instead.
type deviceKubelet struct {
	mu    sync.Mutex
	pods  []string                                  // namespace/name, in the order taken in
	held  map[string]map[string]map[string][]string // pod → container → resource → IDs
	fault func(ctx context.Context, call int) error
	calls int
}

func newDeviceKubelet(pods ...string) *deviceKubelet {
	return &deviceKubelet{pods: pods, held: map[string]map[string]map[string][]string{}}
}

func (k *deviceKubelet) hold(pod, container, resource string, ids []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held[pod] == nil {
		k.held[pod] = map[string]map[string][]string{}
	}
	if k.held[pod][container] == nil {
		k.held[pod][container] = map[string][]string{}
	}
	k.held[pod][container][resource] = ids
}

// forget drops the kubelet's record of the pod's devices (a lost checkpoint).
func (k *deviceKubelet) forget(pod string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.held, pod)
}

// takeIn adds pods to the kubelet's pod manager (it is about to admit them).
func (k *deviceKubelet) takeIn(pods ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = append(k.pods, pods...)
}

func (k *deviceKubelet) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.fault != nil {
		if err := k.fault(ctx, k.calls); err != nil {
			return nil, err
		}
	}
	var out []*podresourcesapi.PodResources
	for _, p := range k.pods {
		ns, name := "default", p
		pr := &podresourcesapi.PodResources{Namespace: ns, Name: name}
		containers := slices.Sorted(maps.Keys(k.held[p]))
		if len(containers) == 0 {
			containers = []string{"main"}
		}
		for _, c := range containers {
			cr := &podresourcesapi.ContainerResources{Name: c}
			for r, ids := range k.held[p][c] {
				cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: r, DeviceIds: ids})
			}
			pr.Containers = append(pr.Containers, cr)
		}
		out = append(out, pr)
	}
	return out, nil
}

// admit runs the kubelet's calls for the pod's container "main" (memory,
// then core) with IDs of prefix, recording each answer as the kubelet does.
func admit(t *testing.T, a *Allocator, k *deviceKubelet, pod, prefix string) []*map[string]string {
	t.Helper()
	var envs []*map[string]string
	for _, r := range []struct {
		name string
		n    int
	}{{protocol.ResourceMemory, 4}, {protocol.ResourceCore, 30}} {
		devs := ids(prefix+"-"+r.name, r.n)
		resp, err := a.Allocate(context.Background(), r.name, devs)
		if err != nil {
			t.Fatalf("%s %s: %v", pod, r.name, err)
		}
		k.hold(pod, "main", r.name, devs)
		envs = append(envs, &resp.Envs)
	}
	return envs
}

func running(p *v1.Pod) *v1.Pod {
	p.Status.Phase = v1.PodRunning
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "main", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	return p
}

func restarting(p *v1.Pod) *v1.Pod {
	p.Status.Phase = v1.PodRunning
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "main", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	return p
}

// TestReissuedAllocateGetsTheSameGrant: the kubelet lost its record of a
// running container and calls Allocate again, from the pod worker, with
// fresh device IDs: the container gets its own grant again (same card,
// same environment), and the record follows the new devices.
func TestReissuedAllocateGetsTheSameGrant(t *testing.T) {
	p := running(general("p", 0, 4, 30, 0))
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}})
	k := newDeviceKubelet("p")
	a.Kubelet = k
	first := admit(t, a, k, "p", "old")
	k.forget("p")
	again := admit(t, a, k, "p", "new")
	for i := range first {
		if diff := cmp.Diff(*first[i], *again[i]); diff != "" {
			t.Errorf("call %d re-issued (-first +again):\n%s", i, diff)
		}
	}
	g, ok, err := a.Store.Get("uid-p", "main", protocol.ResourceMemory)
	if err != nil || !ok || !sameIDs(g.DeviceIDs, ids("new-"+protocol.ResourceMemory, 4)) {
		t.Errorf("record %+v (ok %v, err %v): want the re-issued devices", g, ok, err)
	}
	if len(*granted) != 1 {
		t.Errorf("grant annotation written %d times, want once", len(*granted))
	}
}

// TestStoreLostRunningGrantRecovered: the agent's store is empty (lost
// --dbfile) while the kubelet lists the running pod's devices. The next
// admission of the same size gets its own card, not the running pod's, and
// the running pod's grant is put back as its grant annotation says.
func TestStoreLostRunningGrantRecovered(t *testing.T) {
	p := running(general("p", 0, 4, 30, 0))
	// The agent had answered p with card 2 (its annotation says so).
	g := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-p", Node: testNode, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{slice(2, 4, 30)}}}}
	v, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[protocol.AnnotationGrant] = v
	q := general("q", 5, 4, 30, 1)
	pods := []*v1.Pod{p, q}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: pods, fresh: pods})
	k := newDeviceKubelet("p", "q")
	k.hold("p", "main", protocol.ResourceMemory, ids("pm", 4))
	k.hold("p", "main", protocol.ResourceCore, ids("pc", 30))
	a.Kubelet = k

	envs := admit(t, a, k, "q", "q")
	if got := (*envs[0])["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-1" {
		t.Errorf("q got card %s, want its own GPU-1 (the running pod p holds GPU-2)", got)
	}
	for _, r := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
		rec, ok, err := a.Store.Get("uid-p", "main", r)
		if err != nil || !ok {
			t.Fatalf("p's %s grant not recovered: %v", r, err)
		}
		if len(rec.Slices) != 1 || rec.Slices[0].UUID != "GPU-2" {
			t.Errorf("p's recovered %s grant %+v: want card GPU-2, from its grant annotation", r, rec.Slices)
		}
	}
	rec, _, _ := a.Store.Get("uid-p", "main", protocol.ResourceMemory)
	if !sameIDs(rec.DeviceIDs, ids("pm", 4)) {
		t.Errorf("recovered devices %v, want the kubelet's", rec.DeviceIDs)
	}
}

// TestReissueBesideAdmissionNotSwapped: p's container restarts after the
// kubelet lost its record (a re-issue, fresh IDs) while q, with the same
// request on another card, is being admitted. Nothing tells the two calls
// apart, so neither may get the other's card: the agent refuses both; once
// the kubelet has rejected q, p's retry gets its own card. A container shown
// running (its record lost, but not restarting) does not block q's
// admission, and still gets its own grant when it is re-issued.
func TestReissueBesideAdmissionNotSwapped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pStatus func(*v1.Pod) *v1.Pod
		calls   []string // whose call comes, in order
		want    []string // the card each call is answered with, "" for refused
	}{
		{name: "p restarting, its re-issue first", pStatus: restarting, calls: []string{"p", "q"}, want: []string{"", ""}},
		{name: "p restarting, q's admission first", pStatus: restarting, calls: []string{"q", "p"}, want: []string{"", ""}},
		{name: "p shown running", pStatus: running, calls: []string{"q", "p"}, want: []string{"GPU-1", "GPU-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := general("p", 0, 4, 30, 0)
			q := general("q", 5, 4, 30, 1)
			pods := &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}}
			a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
			k := newDeviceKubelet("p")
			a.Kubelet = k
			admit(t, a, k, "p", "p0")
			k.forget("p")
			tc.pStatus(p)
			pods.cached, pods.fresh = []*v1.Pod{p, q}, []*v1.Pod{p, q}
			k.pods = append(k.pods, "q")

			call := func(owner string) string {
				devs := ids(owner+"-again", 4)
				resp, err := a.Allocate(context.Background(), protocol.ResourceMemory, devs)
				if err != nil {
					if !errors.Is(err, ErrAmbiguous) {
						t.Fatalf("%s: %v, want ErrAmbiguous or an answer", owner, err)
					}
					return ""
				}
				k.hold(owner, "main", protocol.ResourceMemory, devs)
				return resp.Envs["NVIDIA_VISIBLE_DEVICES"]
			}
			for i, owner := range tc.calls {
				if got := call(owner); got != tc.want[i] {
					t.Errorf("%s's call answered %q, want %q", owner, got, tc.want[i])
				}
			}
			if tc.want[0] == "" {
				q.Status.Phase = v1.PodFailed // the kubelet rejected q's admission
				if got := call("p"); got != "GPU-0" {
					t.Errorf("p's retry answered %q, want its own GPU-0", got)
				}
			}
		})
	}
}

// TestConcurrentCallsNeverSwap runs p's re-issue and q's admission at the
// same time, many times, each goroutine knowing whose call it is: no answer
// is ever the other pod's card (go test -race checks the locking).
func TestConcurrentCallsNeverSwap(t *testing.T) {
	for i := 0; i < 20; i++ {
		p := restarting(general("p", 0, 4, 30, 0))
		q := general("q", 5, 4, 30, 1)
		pods := &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}}
		a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
		k := newDeviceKubelet("p")
		a.Kubelet = k
		admit(t, a, k, "p", "p0")
		k.forget("p")
		pods.cached, pods.fresh = []*v1.Pod{p, q}, []*v1.Pod{p, q}
		k.pods = append(k.pods, "q")
		want := map[string]string{"p": "GPU-0", "q": "GPU-1"}
		var wg sync.WaitGroup
		for _, owner := range []string{"p", "q"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids(owner+"-c", 4))
				if err != nil {
					return
				}
				if got := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; got != want[owner] {
					t.Errorf("round %d: %s answered %s, want %s", i, owner, got, want[owner])
				}
			}()
		}
		wg.Wait()
	}
}
