package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestCheckpointRoundTrip(t *testing.T) {
	cp := Checkpoint{Path: filepath.Join(t.TempDir(), "sub", "cp.json")}
	empty, err := cp.Load()
	if err != nil || len(empty) != 0 {
		t.Fatalf("missing file: %v, %v; want no claim", empty, err)
	}
	shared := makeClaim("b", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassOnline)}, result("gpu", 0, 4, 0))
	shared.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("uid-b"))
	want := map[types.UID]Prepared{
		"u1": {UID: "u1", Namespace: "ns", Name: "a", Requests: []PreparedRequest{{
			Request:    Request{Name: "gpu", Class: protocol.ClassOffline, Devices: []string{"gpu-1"}, Slices: []protocol.Slice{{Index: 1, UUID: "GPU-1", MemoryGiB: 3, Cores: 20}}},
			SpecDevice: "u1_gpu", CardDevices: []string{"nvidia.com/gpu=GPU-1"},
			Edits: cdispec.ContainerEdits{Env: []string{"A=1"}, Mounts: []*cdispec.Mount{{HostPath: "/h", ContainerPath: "/c", Type: "bind", Options: []string{"rbind", "ro"}}}},
		}}},
		"u2": {UID: "u2", Namespace: "ns", Name: "b", Allocation: allocationOf(shared)},
	}
	if err := cp.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := cp.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if entries, _ := os.ReadDir(filepath.Dir(cp.Path)); len(entries) != 1 {
		t.Errorf("files beside the checkpoint: %v (a temporary file left?)", entries)
	}
	for name, raw := range map[string]string{
		"version 3":     `{"version":3,"claims":[]}`,
		"unknown field": `{"version":1,"claims":[],"extra":1}`,
		"no uid":        `{"version":1,"claims":[{"namespace":"ns","name":"a","requests":null}]}`,
		"truncated":     `{"version":1,"claims":[`,
	} {
		if err := os.WriteFile(cp.Path, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Load(); err == nil || !strings.Contains(err.Error(), cp.Path) {
			t.Errorf("%s: Load error %v, want one naming the file", name, err)
		}
	}
}

// TestRestartKeepsPrepared: a driver started again over the checkpoint
// answers the kubelet as before, and writes a spec that is gone (the
// node's /var/run was emptied) again as it was.
func TestRestartKeepsPrepared(t *testing.T) {
	specs, dir := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	claim := makeClaim("c", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}, result("gpu", 1, 8, 50))
	first, _ := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort).PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	before := readClaimSpec(t, dir, "uid-c_gpu")
	if err := os.Remove(filepath.Join(dir, specFiles(t, dir)[0])); err != nil {
		t.Fatal(err)
	}
	// The node's backend changed meanwhile: a prepared claim keeps its answer.
	restarted := newTestDriver(t, specs, cp, failing{}, protocol.PolicyFixedShare)
	again, _ := restarted.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("answer after restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before, readClaimSpec(t, dir, "uid-c_gpu")); diff != "" {
		t.Errorf("spec written again (-before +after):\n%s", diff)
	}
}

// failing is a backend that refuses everything.
type failing struct{ enforce.Env }

func (failing) Allocate(enforce.Request) (*pluginapi.ContainerAllocateResponse, error) {
	return nil, os.ErrInvalid
}

func TestUnprepareIdempotent(t *testing.T) {
	specs, dir := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
	ctx := context.Background()
	claim := makeClaim("c", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}, result("gpu", 0, 2, 10))
	ref := kubeletplugin.NamespacedObject{UID: claim.UID, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c"}}
	unknown := kubeletplugin.NamespacedObject{UID: "never", NamespacedName: types.NamespacedName{Namespace: "ns", Name: "never"}}
	if res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{unknown}); err != nil || res["never"] != nil {
		t.Fatalf("unknown claim: %v, %v; want success", res, err)
	}
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); res[claim.UID].Err != nil {
		t.Fatal(res[claim.UID].Err)
	}
	for i := range 2 {
		res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{ref})
		if _, listed := res[claim.UID]; err != nil || !listed || res[claim.UID] != nil {
			t.Fatalf("unprepare #%d: %v, %v", i+1, res, err)
		}
		if files := specFiles(t, dir); len(files) != 0 {
			t.Errorf("unprepare #%d: specs left: %v", i+1, files)
		}
		if left, _ := (Checkpoint{Path: cp}).Load(); len(left) != 0 {
			t.Errorf("unprepare #%d: checkpoint still holds %v", i+1, left)
		}
	}
}

// TestCleanupStale: at start, the checkpointed claims whose ResourceClaim
// is gone or was created again under another UID are unprepared; the
// others stay.
func TestCleanupStale(t *testing.T) {
	specs, dir := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
	cfg := []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}
	kept, gone, recreated := makeClaim("kept", cfg, result("gpu", 0, 1, 10)), makeClaim("gone", cfg, result("gpu", 0, 1, 10)), makeClaim("again", cfg, result("gpu", 1, 1, 10))
	if _, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{kept, gone, recreated}); err != nil {
		t.Fatal(err)
	}
	newer := recreated.DeepCopy()
	newer.UID = "uid-again-2"
	client := fake.NewClientset(kept, newer)
	restarted := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
	if err := restarted.CleanupStale(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range restarted.Prepared() {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"kept"}, names); diff != "" {
		t.Errorf("prepared after cleanup (-want +got):\n%s", diff)
	}
	if files := specFiles(t, dir); len(files) != 1 || !strings.Contains(files[0], "uid-kept") {
		t.Errorf("specs after cleanup: %v, want uid-kept's only", files)
	}
	if onDisk, _ := (Checkpoint{Path: cp}).Load(); len(onDisk) != 1 {
		t.Errorf("checkpoint after cleanup: %v", onDisk)
	}
}

// TestDriverConcurrent: prepare and unprepare calls from many goroutines
// (the helper serialises them, a future RollingUpdate would not) keep the
// checkpoint consistent; run with -race.
func TestDriverConcurrent(t *testing.T) {
	specs, _ := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
	cfg := []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := makeClaim("c"+string(rune('a'+i)), cfg, result("gpu", i%2, 1, 10))
			d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			_ = d.Prepared()
			if i%2 == 0 {
				d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
			}
		}()
	}
	wg.Wait()
	onDisk, err := (Checkpoint{Path: cp}).Load()
	if err != nil || len(onDisk) != 4 || len(d.Prepared()) != 4 {
		t.Errorf("checkpoint %d claims (%v), driver %d: want 4 each", len(onDisk), err, len(d.Prepared()))
	}
}

// TestGrants: the prepared claims as the hami-core upkeep reads them (the
// names of the region directory prepare created) and as the priority
// controller reads them (the pods' containers that use the claims).
func TestGrants(t *testing.T) {
	specs, _ := cdiNode(t)
	b := backends(t)[enforce.NameHAMiCore]
	d := newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), b, protocol.PolicyFixedShare)
	claim := makeClaim("off", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassOffline)}, result("gpu", 1, 3, 40))
	if res, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim}); res[claim.UID].Err != nil {
		t.Fatal(res[claim.UID].Err)
	}
	slice := []protocol.Slice{{Index: 1, UUID: testCards[1].UUID, MemoryGiB: 3, Cores: 40}}
	claimGrants := ClaimGrants(d.Prepared())
	want := []store.Grant{{Version: store.SchemaVersion, PodUID: "uid-off", Namespace: "ns", Name: "off", Container: "gpu",
		Resource: protocol.ResourceMemory, Class: protocol.ClassOffline, Slices: slice}}
	if diff := cmp.Diff(want, claimGrants); diff != "" {
		t.Errorf("ClaimGrants (-want +got):\n%s", diff)
	}
	var regionDir string
	for _, m := range readClaimSpecMounts(t, d) {
		if m.ContainerPath == enforce.HAMiContainerCacheDir {
			regionDir = filepath.Base(m.HostPath)
		}
	}
	if uid, ctr, ok := hamiregion.ParseContainerDir(regionDir); !ok || uid != claimGrants[0].PodUID || ctr != claimGrants[0].Container {
		t.Errorf("region directory %q is not the grant's %s_%s: the upkeep's sweep would remove it", regionDir, claimGrants[0].PodUID, claimGrants[0].Container)
	}

	pod := func(name string, claimName, statusName *string, ctrs ...v1.Container) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("pod-" + name)},
			Spec: v1.PodSpec{Containers: ctrs, ResourceClaims: []v1.PodResourceClaim{{Name: "g", ResourceClaimName: claimName, ResourceClaimTemplateName: ptr.To("t")}}}}
		if claimName != nil {
			p.Spec.ResourceClaims[0].ResourceClaimTemplateName = nil
		}
		if statusName != nil {
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "g", ResourceClaimName: statusName}}
		}
		return p
	}
	uses := func(name string, request string) v1.Container {
		return v1.Container{Name: name, Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "g", Request: request}}}}
	}
	pods := []*v1.Pod{
		pod("direct", ptr.To("off"), nil, uses("main", ""), v1.Container{Name: "sidecar"}, uses("second", "gpu")),
		pod("templated", nil, ptr.To("off"), uses("main", "gpu")),
		pod("other-request", ptr.To("off"), nil, uses("main", "other")),
		pod("other-claim", ptr.To("someone-else"), nil, uses("main", "")),
	}
	got := PodGrants(d.Prepared(), pods)
	grant := func(pod, ctr, resource string) store.Grant {
		return store.Grant{Version: store.SchemaVersion, PodUID: "pod-" + pod, Namespace: "ns", Name: pod, Container: ctr,
			Resource: resource, Class: protocol.ClassOffline, Slices: slice}
	}
	// The pod's second container on the same claim holds its memory, not
	// the pod's cores a second time.
	wantPods := []store.Grant{
		grant("direct", "main", protocol.ResourceMemory), grant("direct", "main", protocol.ResourceCoreGreedy),
		grant("direct", "second", protocol.ResourceMemory),
		grant("templated", "main", protocol.ResourceMemory), grant("templated", "main", protocol.ResourceCoreGreedy),
	}
	if diff := cmp.Diff(wantPods, got); diff != "" {
		t.Errorf("PodGrants (-want +got):\n%s", diff)
	}
}

func readClaimSpecMounts(t *testing.T, d *Driver) []*cdispec.Mount {
	t.Helper()
	for _, p := range d.Prepared() {
		return p.Requests[0].Edits.Mounts
	}
	return nil
}
