package allocate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// The tests of this file are the event orders in which a kubelet or an
// agent that answers late or not at all once handed one slice to two
// containers (README: "When the kubelet does not answer").

var rateLimited = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// everyOther refuses the kubelet's odd-numbered List calls with err.
func everyOther(err error) func(context.Context, int) error {
	return func(_ context.Context, call int) error {
		if call%2 == 1 {
			return err
		}
		return nil
	}
}

// allocCall answers one Allocate for the owner's container "main" and records
// the devices on it as the kubelet does; it returns the card answered (the
// memory answer names it; the record of a core answer does), "" and the
// error when refused.
func allocCall(a *Allocator, k *deviceKubelet, owner, resource string, devs []string) (string, error) {
	resp, err := a.Allocate(context.Background(), resource, devs)
	if err != nil {
		return "", err
	}
	k.hold(owner, "main", resource, devs)
	if card, ok := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; ok {
		return card, nil
	}
	g, ok, err := a.Store.ByDevices(resource, devs)
	if err != nil || !ok || len(g.Slices) != 1 {
		return "", fmt.Errorf("no record of the %s answer (ok %v, err %v)", resource, ok, err)
	}
	return g.Slices[0].UUID, nil
}

// Twins t (older, card 0) and p (younger, card 1); the kubelet admits p
// first while its PodResources List refuses every other call (its rate
// limit). A refused List once made the order rule answer p's memory call
// with t's slice, and t's later admission was "re-issued" card 0 again:
// both containers held card 0's memory. Each must get its own card.
func TestRateLimitedKubeletTwinsKeepTheirCards(t *testing.T) {
	tw, p := general("t", 1, 4, 30, 0), general("p", 5, 4, 30, 1)
	pods := &fakePods{cached: []*v1.Pod{tw, p}, fresh: []*v1.Pod{tw, p}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	k := newDeviceKubelet("p")
	k.fault = everyOther(rateLimited)
	a.Kubelet = k
	admitWant := func(owner, card string) {
		t.Helper()
		for _, r := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
			n := map[string]int{protocol.ResourceMemory: 4, protocol.ResourceCore: 30}[r]
			got, err := allocCall(a, k, owner, r, ids(owner+"-"+r, n))
			if err != nil || got != card {
				t.Errorf("%s's %s call answered %q (err %v), want its own %s", owner, r, got, err, card)
			}
		}
	}
	admitWant("p", "GPU-1")
	k.takeIn("t")
	admitWant("t", "GPU-0")
	for _, who := range []string{"t", "p"} {
		g, ok, err := a.Store.Get("uid-"+who, "main", protocol.ResourceMemory)
		if err != nil || !ok || !sameIDs(g.DeviceIDs, ids(who+"-"+protocol.ResourceMemory, 4)) {
			t.Errorf("%s's memory record %+v (ok %v, err %v): want its own devices", who, g, ok, err)
		}
	}
}

// A kubelet that keeps refusing gets no guess: the call is refused and
// nothing is recorded. Only an absent API (no socket, List not
// implemented) leaves the order rule to decide.
func TestKubeletRefusalsRefuseTheCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		granted bool
	}{
		{"rate limit every time", rateLimited, false},
		{"kubelet restarting", status.Error(codes.Unavailable, "connection refused"), false},
		{"an unknown failure", errors.New("listing pod resources: EOF"), false},
		{"socket absent", podresources.ErrUnavailable, true},
		{"List not implemented", status.Error(codes.Unimplemented, "unknown service"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, young := general("old", 1, 4, 30, 0), general("young", 5, 4, 30, 1)
			a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{old, young}, fresh: []*v1.Pod{old, young}})
			k := newDeviceKubelet("young")
			k.fault = func(context.Context, int) error { return tc.err }
			a.Kubelet = k
			got, err := allocCall(a, k, "old", protocol.ResourceMemory, ids("m", 4))
			if tc.granted != (err == nil) {
				t.Fatalf("answered %q, err %v; want granted %v", got, err, tc.granted)
			}
			grants, _ := a.Store.List()
			if !tc.granted && len(grants) != 0 {
				t.Errorf("a refused call recorded %+v", grants)
			}
			if tc.granted && got != "GPU-0" {
				t.Errorf("absent API: answered %q, want the order rule's GPU-0", got)
			}
		})
	}
}

// A call whose context ends while it is being answered (the kubelet gave
// up, the agent is restarting its plugins) records nothing: the kubelet
// never saw the answer.
func TestCancelledCallRecordsNothing(t *testing.T) {
	p := general("p", 1, 4, 30, 0)
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}})
	k := newDeviceKubelet("p")
	ctx, cancel := context.WithCancel(context.Background())
	k.fault = func(context.Context, int) error { cancel(); return nil } // ends while List answers
	a.Kubelet = k
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m", 4)); err == nil {
		t.Fatal("a cancelled call was answered")
	}
	if grants, _ := a.Store.List(); len(grants) != 0 || len(*granted) != 0 {
		t.Errorf("a cancelled call recorded %+v (grant annotations %d)", grants, len(*granted))
	}
	k.fault = nil
	if got, err := allocCall(a, k, "p", protocol.ResourceMemory, ids("m2", 4)); err != nil || got != "GPU-0" {
		t.Errorf("the kubelet's next call answered %q, err %v; want GPU-0", got, err)
	}
}

// A record whose devices the kubelet lists on another container is held
// by that container, not lost: it is never re-issued to the container it
// names (that would hand the same card twice).
func TestRecordHeldByAnotherContainerNotReissued(t *testing.T) {
	tw, p := general("t", 1, 4, 30, 0), general("p", 5, 4, 30, 1)
	pods := &fakePods{cached: []*v1.Pod{tw, p}, fresh: []*v1.Pod{tw, p}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	k := newDeviceKubelet("p")
	a.Kubelet = nil // an agent of before: the order rule gave p's call t's slice
	if got, err := allocCall(a, k, "p", protocol.ResourceMemory, ids("d1", 4)); err != nil || got != "GPU-0" {
		t.Fatalf("setup: p's call answered %q, err %v; want t's GPU-0 (order rule)", got, err)
	}
	a.Kubelet = k
	k.takeIn("t")
	got, err := allocCall(a, k, "t", protocol.ResourceMemory, ids("d2", 4))
	if got == "GPU-0" {
		t.Fatalf("t was answered GPU-0, whose slice p holds: one slice, two containers")
	}
	if err == nil || !strings.Contains(err.Error(), "held by default/p/main") {
		t.Errorf("t's call: %q, %v; want refused, naming p's container as the holder of t's record", got, err)
	}
}

// A vocabulary container's devices are listed under the vocabulary's
// resource: once admitted (not yet running), it is no rival of a native
// admission of the same size; and when the kubelet loses its record, its
// vocabulary call is re-issued its own grant.
func TestVocabularyGrantsJudgedUnderTheirResource(t *testing.T) {
	v := vocabPod("v", 1, []map[string]int64{{vocab.VCUDACore: 30, vocab.VCUDAMemory: 16}}, [][]protocol.Slice{{slice(0, 4, 30)}})
	v.Spec.Containers[0].Name = "main"
	setAssignment(v, &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-v", Node: testNode, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{slice(0, 4, 30)}}}})
	n := general("n", 5, 4, 30, 1)
	pods := &fakePods{cached: []*v1.Pod{v, n}, fresh: []*v1.Pod{v, n}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	k := newDeviceKubelet("v")
	a.Kubelet = k
	first, err := a.Allocate(context.Background(), vocab.VCUDACore, ids("v", 30))
	if err != nil {
		t.Fatal(err)
	}
	k.hold("v", "main", vocab.VCUDACore, ids("v", 30))
	k.takeIn("n")
	if got, err := allocCall(a, k, "n", protocol.ResourceMemory, ids("n-m", 4)); err != nil || got != "GPU-1" {
		t.Errorf("native admission beside an admitted vocabulary container: %q, err %v; want GPU-1", got, err)
	}
	k.forget("v")
	again, err := a.Allocate(context.Background(), vocab.VCUDACore, ids("v-again", 30))
	if err != nil {
		t.Fatalf("re-issued vocabulary call refused: %v", err)
	}
	if first.Envs["NVIDIA_VISIBLE_DEVICES"] != again.Envs["NVIDIA_VISIBLE_DEVICES"] || again.Envs["QGPU_CORES"] != "30" {
		t.Errorf("re-issued vocabulary answer %v, want the first %v", again.Envs, first.Envs)
	}
	for _, r := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
		g, ok, _ := a.Store.Get("uid-v", "main", r)
		if !ok || !sameIDs(g.DeviceIDs, ids("v-again", 30)) || g.Requested != vocab.VCUDACore {
			t.Errorf("%s record %+v: want the re-issued devices, requested as %s", r, g, vocab.VCUDACore)
		}
	}
}

// The kubelet's list names pods by namespace/name: while the old pod of a
// name (a StatefulSet's) is still listed with its devices, the new pod of
// that name is not served by them, and gets its own slice; also when the
// old pod's record is already dropped (the new pod has not started).
func TestNewPodOfTheSameNameNotServedByTheOld(t *testing.T) {
	for _, dropOld := range []bool{false, true} {
		old := general("s-0", 1, 4, 30, 0)
		a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{old}, fresh: []*v1.Pod{old}})
		k := newDeviceKubelet("s-0")
		a.Kubelet = k
		admit(t, a, k, "s-0", "old")
		if dropOld {
			if _, err := a.Store.DeletePod(string(old.UID)); err != nil {
				t.Fatal(err)
			}
		}
		renewed := general("s-0", 9, 4, 30, 1)
		renewed.UID = "uid-s-0-new"
		setAssignment(renewed, &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(renewed.UID), Node: testNode,
			Class: protocol.ClassGeneral, Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{slice(1, 4, 30)}}}})
		a.Pods = &fakePods{cached: []*v1.Pod{renewed}, fresh: []*v1.Pod{renewed}}
		resp, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("new", 4))
		if err != nil || resp.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-1" {
			t.Errorf("old record dropped %v: the new s-0 got %v, err %v; want its own GPU-1", dropOld, resp, err)
		}
	}
}

// A repeated call (the devices of a recorded grant) is not answered with
// the grant of a pod being deleted: the kubelet frees a terminating pod's
// devices and may hand them to another container.
func TestRepeatNotAnsweredForADeletingPod(t *testing.T) {
	p := running(general("p", 1, 4, 30, 0))
	pods := &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	if _, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("m", 4)); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if resp, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("m", 4)); err == nil {
		t.Errorf("the devices of a deleting pod were answered again: %v", resp.Envs)
	}
}

// Whatever way a pod's last grant is made (an answer again after the
// kubelet lost its record, or a record recovered after the store was
// lost), the grant annotation is written.
func TestGrantAnnotatedAfterReissue(t *testing.T) {
	p := running(general("p", 0, 4, 30, 0))
	a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}})
	k := newDeviceKubelet("p")
	a.Kubelet = k
	a.OnPodGranted = nil // the first grant's annotation write was lost
	admit(t, a, k, "p", "old")
	var n int
	a.OnPodGranted = func(*v1.Pod, *protocol.Assignment) { n++ }
	k.forget("p")
	admit(t, a, k, "p", "new")
	if n == 0 {
		t.Errorf("no grant annotation after the re-issued calls (%d before)", len(*granted))
	}
}
