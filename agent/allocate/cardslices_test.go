package allocate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestSlicesOn(t *testing.T) {
	grant := func(pod string, slices ...protocol.Slice) store.Grant {
		return store.Grant{PodUID: pod, Container: "main", Resource: protocol.ResourceMemory, Slices: slices}
	}
	grants := []store.Grant{
		grant("a", slice(1, 6, 60)),
		grant("b", slice(0, 8, 100), slice(1, 2, 10)),
		grant("done", slice(1, 12, 90)),
		grant("c", slice(2, 4, 30)),
	}
	for _, tc := range []struct {
		name string
		uuid string
		live map[string]bool
		want []protocol.Slice
	}{
		{"live pods' slices on the card", "GPU-1", map[string]bool{"a": true, "b": true, "c": true}, []protocol.Slice{slice(1, 6, 60), slice(1, 2, 10)}},
		{"liveness unknown: every record", "GPU-1", nil, []protocol.Slice{slice(1, 6, 60), slice(1, 2, 10), slice(1, 12, 90)}},
		{"another card", "GPU-2", map[string]bool{"c": true}, []protocol.Slice{slice(2, 4, 30)}},
		{"no record on the card", "GPU-3", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, slicesOn(grants, tc.live, tc.uuid)); diff != "" {
				t.Errorf("slices (-want +got):\n%s", diff)
			}
		})
	}
}

// cardSlicesBackend records what Request.CardSlices answers on each call.
type cardSlicesBackend struct{ seen [][]protocol.Slice }

func (*cardSlicesBackend) Name() string { return "record" }
func (b *cardSlicesBackend) Allocate(req enforce.Request) (*pluginapi.ContainerAllocateResponse, error) {
	s, err := req.CardSlices(req.Slices[0].UUID)
	if err != nil {
		return nil, err
	}
	b.seen = append(b.seen, s)
	return enforce.Env{}.Allocate(req)
}

// TestAllocatorCardSlices: the backend is told the slices the records hold
// on the card (the mps backend's ceiling): none for the first container,
// the first one's for the second; the records of a finished pod and of a
// pod gone from the cache do not count.
func TestAllocatorCardSlices(t *testing.T) {
	ctx := context.Background()
	big, small := general("big", 0, 6, 60, 1), general("small", 1, 4, 30, 1)
	pods := &fakePods{cached: []*v1.Pod{big}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	b := &cardSlicesBackend{}
	a.Config = func() (enforce.Backend, protocol.Policy, error) { return b, protocol.PolicyFixedShare, nil }
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("big", 6)); err != nil {
		t.Fatal(err)
	}
	pods.cached = []*v1.Pod{big, small}
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("small", 4)); err != nil {
		t.Fatal(err)
	}
	big.Status.Phase = v1.PodSucceeded
	other := general("other", 2, 2, 10, 1)
	pods.cached = []*v1.Pod{big, small, other}
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("other", 2)); err != nil {
		t.Fatal(err)
	}
	last := general("last", 3, 1, 10, 1)
	pods.cached = []*v1.Pod{other, last} // small deleted, its record still there
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("last", 1)); err != nil {
		t.Fatal(err)
	}
	want := [][]protocol.Slice{nil, {slice(1, 6, 60)}, {slice(1, 4, 30)}, {slice(1, 2, 10)}}
	if diff := cmp.Diff(want, b.seen); diff != "" {
		t.Errorf("slices on the card per call (-want +got):\n%s", diff)
	}
}
