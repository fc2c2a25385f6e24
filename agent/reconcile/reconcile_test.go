package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/pods"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const node = "n1"

func slice(card int, mem, cores int64) protocol.Slice {
	return protocol.Slice{Index: card, UUID: fmt.Sprintf("GPU-%d", card), MemoryGiB: mem, Cores: cores}
}

// pod returns a general pod with one container "main" assigned mem/cores on card.
func pod(name string, mem, cores int64, card int) (*v1.Pod, *protocol.Assignment) {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
			protocol.ResourceMemory: *resource.NewQuantity(mem, resource.DecimalSI),
			protocol.ResourceCore:   *resource.NewQuantity(cores, resource.DecimalSI),
		}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "main",
			ContainerID: "containerd://" + name, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}},
	}
	a := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: node, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{slice(card, mem, cores)}}}}
	v, _ := a.Encode()
	p.Annotations[protocol.AnnotationAssignment] = v
	return p, a
}

// grantBoth records memory and core grants as Allocate would, with device IDs prefix-mem-i / prefix-core-i.
func grantBoth(t *testing.T, s *store.Store, p *v1.Pod, a *protocol.Assignment, prefix string) {
	t.Helper()
	if err := putBoth(s, p, a, prefix); err != nil {
		t.Fatal(err)
	}
}

// putBoth is grantBoth for goroutines other than the test's.
func putBoth(s *store.Store, p *v1.Pod, a *protocol.Assignment, prefix string) error {
	c := a.Containers[0]
	for _, r := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
		n := allocate.Amount(a.Class, c, r)
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("%s-%s-%d", prefix, r, i))
		}
		g := store.Grant{PodUID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Container: "main", Resource: r,
			DeviceIDs: ids, Amount: n, Class: a.Class, Slices: c.Slices, GrantedAt: time.Now()}
		if err := s.Put(g); err != nil {
			return err
		}
	}
	return nil
}

type fakeKubelet []*podresourcesapi.PodResources

func (f fakeKubelet) List(context.Context) ([]*podresourcesapi.PodResources, error) { return f, nil }

// holds reports mem memory devices as the real kubelet does: one
// ContainerDevices entry per device ID.
func holds(p *v1.Pod, prefix string, mem int) *podresourcesapi.PodResources {
	var devs []*podresourcesapi.ContainerDevices
	for i := range mem {
		id := fmt.Sprintf("%s-%s-%d", prefix, protocol.ResourceMemory, i)
		devs = append(devs, &podresourcesapi.ContainerDevices{ResourceName: protocol.ResourceMemory, DeviceIds: []string{id}})
	}
	return &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace, Containers: []*podresourcesapi.ContainerResources{{
		Name: "main", Devices: devs,
	}}}
}

func TestOnce(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	missing, aMissing := pod("missing", 4, 30, 0)
	wrong, aWrong := pod("wrong", 2, 20, 0)
	wrong.Annotations[protocol.AnnotationGrant] = wrong.Annotations[protocol.AnnotationAssignment][:10] // garbage
	gone, aGone := pod("gone", 2, 20, 1)
	twinD, aD := pod("twin-d", 4, 30, 0)
	twinE, aE := pod("twin-e", 4, 30, 1)
	for _, x := range []struct {
		p *v1.Pod
		a *protocol.Assignment
	}{{missing, aMissing}, {wrong, aWrong}, {gone, aGone}, {twinD, aD}, {twinE, aE}} {
		grantBoth(t, s, x.p, x.a, x.p.Name)
	}
	client := fake.NewClientset(missing, wrong, twinD, twinE)
	rec := record.NewFakeRecorder(32)
	r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node), Recorder: rec,
		// The kubelet admitted the twins the other way round.
		PodResources: fakeKubelet{holds(twinD, "twin-e", 4), holds(twinE, "twin-d", 4), holds(missing, "missing", 4)}}
	res, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Dropped: 2, Moved: 2, Written: 4, Rewritten: 1}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	grantCard := func(p *v1.Pod) int {
		got, _ := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		g, err := allocate.GrantOf(got)
		if err != nil || g == nil {
			t.Fatalf("%s: grant %v, %v", p.Name, g, err)
		}
		return g.Containers[0].Slices[0].Index
	}
	if grantCard(twinD) != 1 || grantCard(twinE) != 0 || grantCard(missing) != 0 || grantCard(wrong) != 0 {
		t.Errorf("grants do not follow the kubelet's devices")
	}
	events := strings.Join(drain(rec), "\n")
	for _, want := range []string{ReasonGrantMoved, ReasonGrantRewritten, ReasonGrantWritten} {
		if !strings.Contains(events, want) {
			t.Errorf("no %s event in:\n%s", want, events)
		}
	}
	// A second pass finds nothing to do.
	if res, err := r.Once(ctx); err != nil || res != (Result{}) {
		t.Errorf("second pass: %+v %v", res, err)
	}
}

// TestLostRecordsRecoveredAndAbsentKubelet: devices the kubelet lists and
// the store has no record of (a lost store) are recorded again from the
// pod's grant annotation, else its assignment; without an assignment that
// gives the container the resource, they are only reported. An absent
// PodResources socket is not an error.
func TestLostRecordsRecoveredAndAbsentKubelet(t *testing.T) {
	ctx := context.Background()
	s, _ := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	defer s.Close()
	p, _ := pod("p", 4, 30, 0)
	bare, _ := pod("bare", 4, 30, 1)
	delete(bare.Annotations, protocol.AnnotationAssignment)
	client := fake.NewClientset(p, bare)
	rec := record.NewFakeRecorder(8)
	r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node), Recorder: rec,
		PodResources: fakeKubelet{holds(p, "x", 4), holds(bare, "y", 4)}}
	if res, err := r.Once(ctx); err != nil || res.Recovered != 1 || res.Unknown != 1 {
		t.Errorf("lost records: %+v %v, want 1 recovered and 1 unknown", res, err)
	}
	g, ok, err := s.Get(string(p.UID), "main", protocol.ResourceMemory)
	if err != nil || !ok || len(g.DeviceIDs) != 4 || len(g.Slices) != 1 || g.Slices[0].Index != 0 {
		t.Errorf("recovered record %+v (ok %v, err %v): want the kubelet's 4 devices on card 0", g, ok, err)
	}
	events := strings.Join(drain(rec), "\n")
	if !strings.Contains(events, ReasonGrantRecovered) || !strings.Contains(events, ReasonUnknownDevices) {
		t.Errorf("events:\n%s", events)
	}
	r.PodResources = podresources.Client{Socket: filepath.Join(t.TempDir(), "absent.sock")}
	if _, err := r.Once(ctx); err != nil {
		t.Errorf("absent PodResources socket: %v", err)
	}
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A pod that ended (Succeeded or Failed) keeps its object but holds no card:
// its records are dropped like those of a deleted pod, and a running pod's
// are kept.
func TestOnceDropsTerminalPods(t *testing.T) {
	for _, phase := range []v1.PodPhase{v1.PodSucceeded, v1.PodFailed} {
		t.Run(string(phase), func(t *testing.T) {
			s := openStore(t)
			ended, aEnded := pod("ended", 4, 30, 0)
			ended.Status.Phase = phase
			running, aRunning := pod("running", 4, 30, 1)
			grantBoth(t, s, ended, aEnded, "ended")
			grantBoth(t, s, running, aRunning, "running")
			client := fake.NewClientset(ended, running)
			r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node), Recorder: record.NewFakeRecorder(32)}
			res, err := r.Once(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Dropped != 2 {
				t.Errorf("dropped %d records, want the ended pod's 2", res.Dropped)
			}
			grants, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range grants {
				if g.PodUID != string(running.UID) {
					t.Errorf("record of %s kept: %+v", g.Name, g)
				}
			}
			if len(grants) != 2 {
				t.Errorf("%d records left, want the running pod's 2", len(grants))
			}
		})
	}
}

// countingPods fails every Fresh read and cancels the run after the third.
type countingPods struct {
	calls  int
	cancel context.CancelFunc
}

func (c *countingPods) Cached() ([]*v1.Pod, error) { return nil, nil }

func (c *countingPods) Fresh(context.Context) ([]*v1.Pod, error) {
	c.calls++
	if c.calls == 3 {
		c.cancel()
	}
	return nil, errors.New("apiserver down")
}

// Run passes at once, again every interval whether or not a pass failed,
// and returns when ctx ends.
func TestRunRepeatsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &countingPods{cancel: cancel}
	r := &Reconciler{Node: "n1", Pods: src}
	done := make(chan struct{})
	go func() { r.Run(ctx, time.Millisecond); close(done) }()
	<-done // a Run that ignored ctx would hang here until go test's timeout
	if src.calls != 3 {
		t.Errorf("passes %d, want 3 (the third cancelled the run)", src.calls)
	}
}

// refusingKubelet answers every List with err.
type refusingKubelet struct{ err error }

func (k refusingKubelet) List(context.Context) ([]*podresourcesapi.PodResources, error) {
	return nil, k.err
}

// A kubelet that refuses the pass's List (its rate limit) leaves the
// records uncompared, but the grants they show are still written: the pass
// reports the refusal and annotates the served pod.
func TestGrantsWrittenWhenTheKubeletRefuses(t *testing.T) {
	ctx := context.Background()
	s, _ := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	defer s.Close()
	p, a := pod("p", 4, 30, 0)
	grantBoth(t, s, p, a, "p")
	client := fake.NewClientset(p)
	r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node),
		PodResources: refusingKubelet{status.Error(codes.ResourceExhausted, "rejected by rate limit")}}
	res, err := r.Once(ctx)
	if err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Errorf("pass error %v, want the kubelet's refusal reported", err)
	}
	got, _ := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if g, err := allocate.GrantOf(got); err != nil || g == nil || res.Written != 1 {
		t.Errorf("grant %v (err %v), %d written: want p's grant written despite the refusal", g, err, res.Written)
	}
}

// The kubelet names pods by namespace/name: while it still lists the old
// pod of a name with its devices, the new pod of that name (not yet
// started) is given no record of them, neither moved from the old pod's
// record nor rebuilt from its own assignment.
func TestOldPodOfTheSameNameNotInherited(t *testing.T) {
	ctx := context.Background()
	for _, keepOld := range []bool{true, false} {
		s, _ := store.Open(filepath.Join(t.TempDir(), "meta.db"))
		old, aOld := pod("s-0", 4, 30, 0)
		grantBoth(t, s, old, aOld, "old")
		renewed, _ := pod("s-0", 4, 30, 1)
		renewed.UID = "uid-s-0-new"
		renewed.Status = v1.PodStatus{Phase: v1.PodPending}
		a, _ := allocate.AssignmentOf(old, node)
		a.PodUID = string(renewed.UID)
		v, _ := a.Encode()
		renewed.Annotations[protocol.AnnotationAssignment] = v
		objs := []runtime.Object{renewed}
		if keepOld { // the old pod not yet dropped: its record still counts as alive (a stand-in object of its UID, being deleted)
			now := metav1.Now()
			old.Name, old.DeletionTimestamp = "s-0-old-object", &now
			objs = append(objs, old)
		}
		client := fake.NewClientset(objs...)
		r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node),
			PodResources: fakeKubelet{holds(renewed, "old", 4)}}
		res, err := r.Once(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(string(renewed.UID), "main", protocol.ResourceMemory); ok || res.Moved+res.Recovered != 0 {
			t.Errorf("old pod kept %v: the new s-0 inherited the old one's devices (%+v)", keepOld, res)
		}
		s.Close()
	}
}

// A container that has not started lists, among its devices, one that the
// store records for another pod and others not yet recorded: the
// reconciler moves nothing. Judged by the one recorded device alone, that
// other pod's 1 GiB record matched exactly and was moved onto this 3 GiB
// container (seen in make chaos, kubelet-api-faults: its grant named the
// other pod's card with its own cores, 122 cores on that card).
func TestPartlyRecordedDevicesMoveNothing(t *testing.T) {
	ctx := context.Background()
	for _, bigRecorded := range []bool{true, false} {
		s, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
		if err != nil {
			t.Fatal(err)
		}
		small, aSmall := pod("small", 1, 20, 0)
		big, aBig := pod("big", 3, 31, 1)
		big.Status = v1.PodStatus{Phase: v1.PodPending}
		grantBoth(t, s, small, aSmall, "small")
		if bigRecorded {
			grantBoth(t, s, big, aBig, "big")
		}
		listed := holds(big, "fresh", 3)
		listed.Containers[0].Devices[0].DeviceIds = []string{"small-" + protocol.ResourceMemory + "-0"}
		client := fake.NewClientset(small, big)
		r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node),
			PodResources: fakeKubelet{listed}}
		res, err := r.Once(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g, ok, _ := s.Get(string(small.UID), "main", protocol.ResourceMemory)
		if res.Moved != 0 || !ok || g.PodUID != string(small.UID) {
			t.Errorf("big recorded %v: %+v; small's memory record %+v (held %v), want it left with small", bigRecorded, res, g, ok)
		}
		if g, ok, _ := s.Get(string(big.UID), "main", protocol.ResourceMemory); ok && g.Slices[0].Index != 1 {
			t.Errorf("big recorded %v: big's memory record names card %d, want its own card 1", bigRecorded, g.Slices[0].Index)
		}
		s.Close()
	}
}

// racingKubelet is a kubelet whose List meets an Allocate call: when asked,
// it lets answer run (the agent answering a call: the record written, then
// the answer), waits up to 200 ms for it, and lists the answered
// container's devices only if its record is there by then (the kubelet
// lists devices only once it has the answer, which follows the record).
type racingKubelet struct {
	listed []*podresourcesapi.PodResources
	late   *podresourcesapi.PodResources // listed once answer has run
	answer func() bool                   // runs the call; reports whether it was recorded
}

func (k racingKubelet) List(context.Context) ([]*podresourcesapi.PodResources, error) {
	done := make(chan bool, 1)
	go func() { done <- k.answer() }()
	select {
	case ok := <-done:
		if ok {
			return append(k.listed, k.late), nil
		}
	case <-time.After(200 * time.Millisecond):
	}
	return k.listed, nil
}

// A pod deleted from the kubelet (its devices freed) whose record the
// agent has not dropped yet, and a new pod of the same size answered with
// those very device IDs while the reconciler compares: the new pod's
// record, written after the reconciler read the store and listed by the
// kubelet after, was taken for missing, and the stale record of equal
// devices moved over it, with its card (make chaos, topology, 2026-11-27:
// p-00225 assigned card 2, its grant naming card 1 with its own 2 GiB and
// 9 cores). Holding the Allocator's lock, the reconciler sees the record
// and the kubelet's list of one instant.
func TestRecordAnsweredDuringComparisonKept(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	gone, aGone := pod("gone", 2, 9, 1)
	grantBoth(t, s, gone, aGone, "freed") // the kubelet freed these IDs
	fresh, aFresh := pod("fresh", 2, 9, 2)
	fresh.Status = v1.PodStatus{Phase: v1.PodPending}
	// gone is still in the API when the pass lists pods; the kubelet no
	// longer lists it.
	client := fake.NewClientset(gone, fresh)
	lock := (&allocate.Allocator{}).Exclusive()
	answer := func() bool {
		lock.Lock()
		defer lock.Unlock()
		return putBoth(s, fresh, aFresh, "freed") == nil
	}
	r := &Reconciler{Node: node, Client: client, Store: s, Pods: pods.New(client, node), Exclusive: lock,
		PodResources: racingKubelet{late: holds(fresh, "freed", 2), answer: answer}}
	res, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
		waitFor(t, func() bool { _, ok, _ := s.Get(string(fresh.UID), "main", resource); return ok })
		g, _, _ := s.Get(string(fresh.UID), "main", resource)
		if g.Slices[0].Index != 2 {
			t.Errorf("fresh's %s record names card %d, want its own card 2 (result %+v)", resource, g.Slices[0].Index, res)
		}
	}
	// The next pass, the stale record's pod gone from the API, leaves it so.
	if err := client.CoreV1().Pods(gone.Namespace).Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.PodResources = fakeKubelet{holds(fresh, "freed", 2)}
	if res, err = r.Once(ctx); err != nil || res.Moved != 0 {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
	if g, _, _ := s.Get(string(fresh.UID), "main", protocol.ResourceMemory); g.Slices[0].Index != 2 {
		t.Errorf("after the second pass fresh's memory record names card %d, want 2", g.Slices[0].Index)
	}
}

// waitFor polls cond for up to a minute: only a failing test waits it out.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in a minute")
}

// lateBinding is a pod source whose Fresh list is read before a pod is
// bound; the pod is then admitted and recorded before the pass reads the
// store.
type lateBinding struct {
	pods   []*v1.Pod
	admit  func()
	called bool
}

func (l *lateBinding) Cached() ([]*v1.Pod, error) { return l.pods, nil }

func (l *lateBinding) Fresh(context.Context) ([]*v1.Pod, error) {
	if !l.called {
		l.called = true
		defer l.admit()
	}
	return l.pods, nil
}

// A pod bound after the pass listed the pods, and granted before it read
// the records, is not in the list but alive: its record stays. Dropped, its
// slice counted for nothing on the card until a later pass recovered it
// from the kubelet's list, and the capacity check let another container
// onto it meanwhile.
func TestRecordNewerThanThePodListKept(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	late, aLate := pod("late", 2, 9, 0)
	gone, aGone := pod("gone", 1, 5, 1)
	grantBoth(t, s, gone, aGone, "gone")
	src := &lateBinding{admit: func() {
		time.Sleep(time.Millisecond) // after the list, on any clock resolution
		grantBoth(t, s, late, aLate, "late")
	}}
	r := &Reconciler{Node: node, Client: fake.NewClientset(), Store: s, Pods: src}
	res, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(string(late.UID), "main", protocol.ResourceMemory); !ok || res.Dropped != 2 {
		t.Errorf("late's record kept %v, dropped %d (want kept, and gone's 2 records dropped)", ok, res.Dropped)
	}
}

// openStore opens a store in the test's directory, closed after the test.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
