package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// fakeMPS has every card's daemon ready.
type fakeMPS struct{ root string }

func (f fakeMPS) Dirs(uuid string) (string, string, error) {
	return filepath.Join(f.root, uuid, "pipe"), filepath.Join(f.root, "shm"), nil
}
func (fakeMPS) Whole(string) error { return nil }

func (fakeMPS) Ceil(string, enforce.MPSCeiling) error { return nil }

// backends are the node's backends, each undelivered as the DRA mode
// builds them (enforce.Options without Delivery).
func backends(t *testing.T) map[string]enforce.Backend {
	t.Helper()
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libvgpu.so"), []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := map[string]enforce.Backend{}
	for _, name := range enforce.Names {
		b, err := enforce.New(name, enforce.Options{MPS: fakeMPS{root: filepath.Join(root, "mps")},
			HAMi: enforce.HAMiOptions{LibDir: lib, RegionRoot: filepath.Join(root, "regions"), LockDir: filepath.Join(root, "lock")}})
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// allocateAnswer is what the device plugins' Allocate hands a container
// of slice s today: the backend's answers of the memory call and of the
// class's core call, each with its own variables and mounts.
func allocateAnswer(t *testing.T, b enforce.Backend, req enforce.Request) (map[string]string, []*pluginapi.Mount) {
	t.Helper()
	resources := map[protocol.Class][]string{
		protocol.ClassGeneral: {protocol.ResourceMemory, protocol.ResourceCore},
		protocol.ClassOnline:  {protocol.ResourceMemory},
		protocol.ClassOffline: {protocol.ResourceMemory, protocol.ResourceCoreGreedy},
	}[req.Class]
	envs := map[string]string{}
	var mounts []*pluginapi.Mount
	for _, r := range resources {
		req.Resource = r
		resp, err := b.Allocate(req)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range resp.Envs {
			if old, dup := envs[k]; dup {
				t.Fatalf("%s answers %s twice (%q, %q)", b.Name(), k, old, v)
			}
			envs[k] = v
		}
		mounts = append(mounts, resp.Mounts...)
	}
	return envs, mounts
}

// TestPrepareMapping: a claim's slice gets, in its own CDI spec, exactly
// the variables and mounts Allocate hands a container of that slice under
// the node's backend, for every backend, class and policy; the kubelet is
// answered with the card's device in the node's NVIDIA spec and the
// claim's own.
func TestPrepareMapping(t *testing.T) {
	cases := []struct {
		class       protocol.Class
		memGiB      int64
		cores       int64
		policy      protocol.Policy
		wantEnv     map[string]string // besides the Allocate answer: a few values said outright
		wantAbsence []string
	}{
		{protocol.ClassGeneral, 4, 30, protocol.PolicyFixedShare, map[string]string{"QGPU_MEMORY_GIB": "4", "QGPU_CORES": "30", "QGPU_CLASS": "general"}, nil},
		{protocol.ClassGeneral, 15, 100, protocol.PolicyBestEffort, map[string]string{"QGPU_CORES": "100"}, nil},
		{protocol.ClassOnline, 6, 0, protocol.PolicyBurstShare, map[string]string{"QGPU_MEMORY_GIB": "6", "QGPU_CLASS": "online"}, []string{"QGPU_CORES"}},
		{protocol.ClassOffline, 2, 40, protocol.PolicyFixedShare, map[string]string{"QGPU_CORES": "40", "QGPU_CLASS": "offline"}, nil},
	}
	for name, b := range backends(t) {
		for _, tc := range cases {
			t.Run(name+"/"+string(tc.class)+"/"+string(tc.policy), func(t *testing.T) {
				specs, dir := cdiNode(t)
				d := newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), b, tc.policy)
				claim := makeClaim("c", []resourceapi.DeviceAllocationConfiguration{classConfig(tc.class)}, result("gpu", 0, tc.memGiB, tc.cores))
				res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
				if err != nil || res[claim.UID].Err != nil {
					t.Fatalf("prepare: %v, %v", err, res[claim.UID].Err)
				}
				wantDevices := []kubeletplugin.Device{{Requests: []string{"gpu"}, PoolName: testNode, DeviceName: "gpu-0",
					CDIDeviceIDs: []string{"nvidia.com/gpu=" + testCards[0].UUID, "claim.gpu.qgpu.io/slice=uid-c_gpu"}}}
				if diff := cmp.Diff(wantDevices, res[claim.UID].Devices); diff != "" {
					t.Errorf("devices (-want +got):\n%s", diff)
				}
				slice := protocol.Slice{Index: 0, UUID: testCards[0].UUID, MemoryGiB: tc.memGiB, Cores: tc.cores}
				envs, mounts := allocateAnswer(t, b, enforce.Request{Class: tc.class, Policy: tc.policy, Slices: []protocol.Slice{slice},
					PodUID: "uid-c", Namespace: "ns", Pod: "c", Container: "gpu",
					CardSlices: func(string) ([]protocol.Slice, error) { return nil, nil }}) // alone on its card, as the claim is
				spec := readClaimSpec(t, dir, "uid-c_gpu")
				if diff := cmp.Diff(enforce.CDIEdits(envs, mounts), spec.Devices[0].ContainerEdits); diff != "" {
					t.Errorf("claim spec edits vs Allocate's answer (-want +got):\n%s", diff)
				}
				got := map[string]string{}
				for _, e := range spec.Devices[0].ContainerEdits.Env {
					k, v, _ := strings.Cut(e, "=")
					got[k] = v
				}
				for k, v := range tc.wantEnv {
					if got[k] != v {
						t.Errorf("%s=%q, want %q", k, got[k], v)
					}
				}
				for _, k := range tc.wantAbsence {
					if _, ok := got[k]; ok {
						t.Errorf("%s is set (%q), want none", k, got[k])
					}
				}
			})
		}
	}
}

// TestPrepareWholeCards: a general request of two whole cards is one
// container's two slices, one spec; each card's device goes to the kubelet.
func TestPrepareWholeCards(t *testing.T) {
	specs, dir := cdiNode(t)
	d := newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), enforce.Env{}, protocol.PolicyBestEffort)
	claim := makeClaim("w", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)},
		result("gpus", 0, 15, 100), result("gpus", 1, 80, 100))
	res, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err := res[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	want := []kubeletplugin.Device{
		{Requests: []string{"gpus"}, PoolName: testNode, DeviceName: "gpu-0", CDIDeviceIDs: []string{"nvidia.com/gpu=" + testCards[0].UUID, "claim.gpu.qgpu.io/slice=uid-w_gpus"}},
		{Requests: []string{"gpus"}, PoolName: testNode, DeviceName: "gpu-1", CDIDeviceIDs: []string{"nvidia.com/gpu=" + testCards[1].UUID}},
	}
	if diff := cmp.Diff(want, res[claim.UID].Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	env := readClaimSpec(t, dir, "uid-w_gpus").Devices[0].ContainerEdits.Env
	if !contains(env, "NVIDIA_VISIBLE_DEVICES="+testCards[0].UUID+","+testCards[1].UUID) || !contains(env, "QGPU_MEMORY_GIB=95") {
		t.Errorf("env %v: want both cards and 95 GiB", env)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPrepareRefuses: a claim whose allocation the driver cannot take is
// refused with an error naming the field, and nothing is written (no spec,
// no checkpoint); the other claims of the call are prepared.
func TestPrepareRefuses(t *testing.T) {
	general := []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}
	online := []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassOnline)}
	noCapacity := result("gpu", 0, 4, 30)
	noCapacity.ConsumedCapacity = nil
	noCores := result("gpu", 0, 4, 30)
	delete(noCores.ConsumedCapacity, protocol.DRACapacityCores)
	halfGiB := result("gpu", 0, 4, 30)
	halfGiB.ConsumedCapacity[protocol.DRACapacityMemory] = resource.MustParse("1536Mi")
	otherPool := result("gpu", 0, 4, 30)
	otherPool.Pool = "node-2"
	badDevice := result("gpu", 0, 4, 30)
	badDevice.Device = "gpu-01"
	fromClaim := classConfig(protocol.ClassOnline)
	fromClaim.Source = resourceapi.AllocationConfigSourceClaim
	badConfig := classConfig(protocol.ClassGeneral)
	badConfig.Opaque.Parameters = runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.qgpu.io/v2","kind":"SliceConfig","class":"general"}`)}
	adminAccess := result("gpu", 0, 4, 30)
	adminAccess.AdminAccess = ptr.To(true)
	notAllocated := makeClaim("x", general)
	notAllocated.Status.Allocation = nil
	cases := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"gate off: no consumedCapacity", makeClaim("x", general, noCapacity), "status.allocation.devices.results[0]: consumedCapacity: allocation result has no consumedCapacity (is the DRAConsumableCapacity feature gate on"},
		{"no cores consumed", makeClaim("x", general, noCores), "results[0]: consumedCapacity.cores"},
		{"memory not whole GiB", makeClaim("x", general, halfGiB), "consumedCapacity.memory: invalid value 1536Mi"},
		{"memory above the card", makeClaim("x", general, result("gpu", 0, 16, 30)), "consumedCapacity.memory: invalid value 16Gi: must be whole GiB from 1Gi to the card's 15Gi"},
		{"cores above 100", makeClaim("x", general, result("gpu", 0, 4, 150)), "consumedCapacity.cores: invalid value 150"},
		{"online with cores", makeClaim("x", online, result("gpu", 0, 4, 10)), "an online claim consumes no cores"},
		{"general without cores", makeClaim("x", general, result("gpu", 0, 4, 0)), "a general claim consumes 1 to 100"},
		{"a card the node lacks", makeClaim("x", general, result("gpu", 7, 4, 30)), `results[0]: device: "gpu-7": this node has no card 7`},
		{"a device name never published", makeClaim("x", general, badDevice), `device: unsupported value "gpu-01"`},
		{"another node's pool", makeClaim("x", general, otherPool), `pool: "node-2" is not this node's pool "node-1"`},
		{"no class configuration", makeClaim("x", nil, result("gpu", 0, 4, 30)), "status.allocation.devices.config: no gpu.qgpu.io/v1 SliceConfig"},
		{"a class set in the claim", makeClaim("x", []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral), fromClaim}, result("gpu", 0, 4, 30)), "config[1].source: \"FromClaim\": a claim may not configure driver gpu.qgpu.io"},
		{"a configuration of another version", makeClaim("x", []resourceapi.DeviceAllocationConfiguration{badConfig}, result("gpu", 0, 4, 30)), "config[0].opaque.parameters: apiVersion \"gpu.qgpu.io/v2\""},
		{"not allocated", notAllocated, "status.allocation: not allocated"},
		{"admin access", makeClaim("x", general, adminAccess), "results[0]: adminAccess: true is not supported by this driver"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, dir := cdiNode(t)
			cp := filepath.Join(t.TempDir(), "cp.json")
			d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.claim})
			if err != nil {
				t.Fatal(err)
			}
			got := res[tc.claim.UID].Err
			if got == nil || !strings.Contains(got.Error(), tc.want) || !strings.Contains(got.Error(), "claim ns/x") {
				t.Errorf("error %v, want one naming claim ns/x and %q", got, tc.want)
			}
			if files := specFiles(t, dir); len(files) != 0 {
				t.Errorf("specs written: %v", files)
			}
			if _, err := os.Stat(cp); !os.IsNotExist(err) {
				t.Errorf("checkpoint written (stat: %v)", err)
			}
		})
	}
}

// ceilings records the MPS ceilings put in force, per card.
type ceilings struct {
	fakeMPS
	got map[string][]enforce.MPSCeiling
}

func (c *ceilings) Ceil(uuid string, m enforce.MPSCeiling) error {
	c.got[uuid] = append(c.got[uuid], m)
	return nil
}

// mpsDriver is a driver under the mps backend (fixed-share) whose control
// records the ceilings it is asked to put in force.
func mpsDriver(t *testing.T) (*Driver, *ceilings) {
	t.Helper()
	mps := &ceilings{fakeMPS: fakeMPS{root: t.TempDir()}, got: map[string][]enforce.MPSCeiling{}}
	b, err := enforce.New("mps", enforce.Options{MPS: mps})
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := cdiNode(t)
	return newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), b, protocol.PolicyFixedShare), mps
}

// TestPrepareMPSCeilingCountsPreparedClaims: under the mps backend, a
// claim's ceiling is the largest slice among the claims prepared on its
// card and its own, as Allocate's is among the live containers'.
func TestPrepareMPSCeilingCountsPreparedClaims(t *testing.T) {
	d, mps := mpsDriver(t)
	for _, c := range []struct {
		name       string
		gib, cores int64
	}{{"big", 6, 40}, {"small", 2, 10}} {
		claim := makeClaim(c.name, []resourceapi.DeviceAllocationConfiguration{classConfig(protocol.ClassGeneral)}, result("gpu", 0, c.gib, c.cores))
		res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
		if err != nil || res[claim.UID].Err != nil {
			t.Fatalf("prepare %s: %v, %v", c.name, err, res[claim.UID].Err)
		}
	}
	got := mps.got[testCards[0].UUID]
	if len(got) != 2 || got[1] != got[0] {
		t.Fatalf("ceilings %+v: the small claim's must stay the big one's", got)
	}
}

// TestPrepareMPSCeilingCountsDeviceGrants: on a node switched to DRA
// under running pods, a claim's MPS ceiling counts the device plugins'
// grants on its card too: a claim smaller than a granted container must
// not lower the card's ceiling below that container's slice.
func TestPrepareMPSCeilingCountsDeviceGrants(t *testing.T) {
	d, mps := mpsDriver(t)
	granted := protocol.Slice{Index: 0, UUID: testCards[0].UUID, MemoryGiB: 6, Cores: 40}
	d.cfg.DeviceGrants = func(context.Context, bool) ([]store.Grant, error) {
		return []store.Grant{{PodUID: "pod-uid", Namespace: "ns", Name: "pod", Container: "main", Resource: protocol.ResourceMemory,
			Class: protocol.ClassGeneral, Slices: []protocol.Slice{granted}}}, nil
	}
	want, err := enforce.CeilingOf([]protocol.Slice{granted}, protocol.PolicyFixedShare)
	if err != nil {
		t.Fatal(err)
	}
	claim := makeClaim("small", configs(protocol.ClassGeneral), result("gpu", 0, 2, 10))
	if err := prepareOne(t, d, claim); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if got := mps.got[testCards[0].UUID]; len(got) != 1 || got[0] != want {
		t.Fatalf("ceilings %+v, want the granted container's %+v", got, want)
	}
}
