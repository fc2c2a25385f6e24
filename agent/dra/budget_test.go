package dra

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// configs is the DeviceClass configuration of class c, as the scheduler
// copies it into every allocation of that class.
func configs(c protocol.Class) []resourceapi.DeviceAllocationConfiguration {
	return []resourceapi.DeviceAllocationConfiguration{classConfig(c)}
}

// prepareOne prepares claim alone and returns its result's error.
func prepareOne(t *testing.T, d *Driver, claim *resourceapi.ResourceClaim) error {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatal(err)
	}
	return res[claim.UID].Err
}

// preparedNames are the names of the claims in the checkpoint file.
func preparedNames(t *testing.T, cp string) []string {
	t.Helper()
	onDisk, err := (Checkpoint{Path: cp}).Load()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range onDisk {
		out = append(out, p.Name)
	}
	return out
}

// TestPrepareRefusesOverCapacity (issue 41): the node refuses a claim
// that would take a card past its memory, its 100 general cores or 100
// offline greedy cores, or put general slices beside online/offline ones,
// counting the claims it prepared before; the error names the card, the
// numbers and the claims holding it, and nothing of the refused claim is
// written. Card 0 is a 15 GiB T4, card 1 an 80 GiB A100.
func TestPrepareRefusesOverCapacity(t *testing.T) {
	cases := []struct {
		name   string
		before []*resourceapi.ResourceClaim // prepared first, each must pass
		claim  *resourceapi.ResourceClaim
		want   []string // in the refusal; none: prepared
	}{
		{name: "two general claims of 10 GiB on the T4 (the issue)",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50))},
			claim:  makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 0, 10, 80)),
			want:   []string{"grant would oversubscribe a card", "card 0 (" + testCards[0].UUID + ")", "memory", "10 GiB already held + 10 GiB asked > the card's 15 GiB", "held by claim ns/a 10 GiB"}},
		{name: "memory fits exactly",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50))},
			claim:  makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 0, 5, 50))},
		{name: "general cores over 100",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 1, 10, 50))},
			claim:  makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 1, 10, 80)),
			want:   []string{"card 1 (" + testCards[1].UUID + ")", "50 cores already held + 80 cores asked > the card's 100 cores", "held by claim ns/a 50 cores"}},
		{name: "offline greedy cores over 100",
			before: []*resourceapi.ResourceClaim{
				makeClaim("a", configs(protocol.ClassOffline), result("gpu", 1, 2, 70)),
				makeClaim("on", configs(protocol.ClassOnline), result("gpu", 1, 2, 0))},
			claim: makeClaim("b", configs(protocol.ClassOffline), result("gpu", 1, 2, 40)),
			want:  []string{"greedy cores", "70 cores already held + 40 cores asked > the card's 100 cores", "held by claim ns/a 70 cores"}},
		{name: "online claims hold memory only",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassOnline), result("gpu", 0, 10, 0))},
			claim:  makeClaim("b", configs(protocol.ClassOnline), result("gpu", 0, 5, 0))},
		{name: "general beside online",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassOnline), result("gpu", 1, 2, 0))},
			claim:  makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 1, 2, 10)),
			want:   []string{"card 1", "a general slice never shares a card with online or offline ones", "held by claim ns/a online"}},
		{name: "offline beside general",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 1, 2, 10))},
			claim:  makeClaim("b", configs(protocol.ClassOffline), result("gpu", 1, 2, 10)),
			want:   []string{"an offline slice never shares a card with general ones", "held by claim ns/a general"}},
		{name: "another card",
			before: []*resourceapi.ResourceClaim{makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50))},
			claim:  makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 1, 10, 80))},
		{name: "one claim over by itself (two requests on one card)",
			claim: makeClaim("b", configs(protocol.ClassGeneral), result("x", 0, 8, 50), result("y", 0, 8, 40)),
			want:  []string{"8 GiB already held + 8 GiB asked > the card's 15 GiB", "held by claim ns/b 8 GiB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, dir := cdiNode(t)
			cp := filepath.Join(t.TempDir(), "cp.json")
			d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
			var names []string
			for _, c := range tc.before {
				if err := prepareOne(t, d, c); err != nil {
					t.Fatalf("prepare %s: %v", c.Name, err)
				}
				names = append(names, c.Name)
			}
			err := prepareOne(t, d, tc.claim)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("prepare %s: %v, want it prepared", tc.claim.Name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("prepare %s: prepared, want a refusal saying %q", tc.claim.Name, tc.want)
			}
			for _, w := range append([]string{"claim ns/" + tc.claim.Name}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			for _, f := range specFiles(t, dir) {
				if strings.Contains(f, string(tc.claim.UID)) {
					t.Errorf("spec of the refused claim written: %s", f)
				}
			}
			if got := preparedNames(t, cp); len(got) != len(names) {
				t.Errorf("checkpoint holds %v, want %v", got, names)
			}
		})
	}
}

// TestPrepareCapacityCountsOnce: a claim asked again with the same
// allocation (the kubelet restarted) is answered as before, not counted
// beside itself; one unprepared frees its card.
func TestPrepareCapacityCountsOnce(t *testing.T) {
	specs, _ := cdiNode(t)
	d := newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), enforce.Env{}, protocol.PolicyBestEffort)
	a := makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 0, 10, 60))
	for i := range 2 {
		if err := prepareOne(t, d, a); err != nil {
			t.Fatalf("prepare #%d of the same claim: %v", i+1, err)
		}
	}
	b := makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 0, 10, 40))
	if err := prepareOne(t, d, b); err == nil {
		t.Fatal("b prepared beside a on the T4")
	}
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: a.UID}}); err != nil {
		t.Fatal(err)
	}
	if err := prepareOne(t, d, b); err != nil {
		t.Fatalf("b after a was unprepared: %v", err)
	}
}

// TestPrepareConcurrentOverCapacity: two claims that do not fit one card
// together, prepared from two goroutines at once, never both pass: the
// check and the checkpoint write are under one lock. Run with -race.
func TestPrepareConcurrentOverCapacity(t *testing.T) {
	for round := range 10 {
		specs, _ := cdiNode(t)
		cp := filepath.Join(t.TempDir(), "cp.json")
		d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
		claims := []*resourceapi.ResourceClaim{
			makeClaim("a", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50)),
			makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 0, 10, 80)),
		}
		errs := make([]error, len(claims))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range claims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
				if err == nil {
					err = res[c.UID].Err
				}
				errs[i] = err
			}()
		}
		close(start)
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: a: %v, b: %v; want exactly one prepared", round, errs[0], errs[1])
		}
		if got := preparedNames(t, cp); len(got) != 1 {
			t.Fatalf("round %d: checkpoint holds %v, want one claim", round, got)
		}
	}
}

// TestPrepareReallocated (issue 41): a claim the driver prepared and is
// asked to prepare again under the same UID with another allocation (the
// kubelet did not unprepare the old one) is prepared from the new
// allocation: its card, capacity and class, its spec written again, the
// old entry gone, and the capacity check counting the new allocation but
// not the old one.
func TestPrepareReallocated(t *testing.T) {
	cases := []struct {
		name    string
		others  []*resourceapi.ResourceClaim
		old     *resourceapi.ResourceClaim
		now     *resourceapi.ResourceClaim
		want    []string // the new spec's variables; none: refused
		refusal string
	}{
		{name: "another card",
			old:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 4, 30)),
			now:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 1, 4, 30)),
			want: []string{"NVIDIA_VISIBLE_DEVICES=" + testCards[1].UUID, "QGPU_MEMORY_GIB=4"}},
		{name: "more memory and cores on the same card",
			old:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 4, 30)),
			now:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 8, 60)),
			want: []string{"QGPU_MEMORY_GIB=8", "QGPU_CORES=60"}},
		{name: "another class (the DeviceClass configuration)",
			old:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 1, 4, 30)),
			now:  makeClaim("c", configs(protocol.ClassOffline), result("gpu", 1, 4, 30)),
			want: []string{"QGPU_CLASS=offline"}},
		{name: "the old slice does not count against the new one",
			old:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50)),
			now:  makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 14, 90)),
			want: []string{"QGPU_MEMORY_GIB=14", "QGPU_CORES=90"}},
		{name: "the new slice counts against the others",
			others:  []*resourceapi.ResourceClaim{makeClaim("b", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50))},
			old:     makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 1, 10, 50)),
			now:     makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 10, 50)),
			refusal: "held by claim ns/b 10 GiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, dir := cdiNode(t)
			cp := filepath.Join(t.TempDir(), "cp.json")
			d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
			for _, c := range append(tc.others, tc.old) {
				if err := prepareOne(t, d, c); err != nil {
					t.Fatalf("prepare %s: %v", c.Name, err)
				}
			}
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.now})
			if err != nil {
				t.Fatal(err)
			}
			got := res[tc.now.UID]
			if tc.refusal != "" {
				if got.Err == nil || !strings.Contains(got.Err.Error(), tc.refusal) {
					t.Fatalf("prepare again: %v, want a refusal saying %q", got.Err, tc.refusal)
				}
				if _, err := os.Stat(filepath.Join(dir, specFileOf("uid-c_gpu"))); !os.IsNotExist(err) {
					t.Errorf("the old spec is left (stat: %v)", err)
				}
				if names := preparedNames(t, cp); len(names) != 1 || names[0] != "b" {
					t.Errorf("checkpoint holds %v, want b only (the old entry of c is gone)", names)
				}
				return
			}
			if got.Err != nil {
				t.Fatalf("prepare again: %v", got.Err)
			}
			wantDevice := tc.now.Status.Allocation.Devices.Results[0].Device
			if len(got.Devices) != 1 || got.Devices[0].DeviceName != wantDevice {
				t.Errorf("devices %+v, want %s", got.Devices, wantDevice)
			}
			env := readClaimSpec(t, dir, "uid-c_gpu").Devices[0].ContainerEdits.Env
			for _, w := range tc.want {
				if !contains(env, w) {
					t.Errorf("spec env %v lacks %s", env, w)
				}
			}
			var slices []protocol.Slice
			for _, p := range d.Prepared() {
				if p.UID == types.UID("uid-c") {
					slices = p.Requests[0].Slices
				}
			}
			r := tc.now.Status.Allocation.Devices.Results[0]
			mem := r.ConsumedCapacity[protocol.DRACapacityMemory]
			if len(slices) != 1 || protocol.DRADeviceName(slices[0].Index) != r.Device || slices[0].MemoryGiB<<30 != mem.Value() {
				t.Errorf("prepared slices %+v, want the new allocation's", slices)
			}
			// Asked once more, the new preparation is answered as it is.
			again, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.now})
			if again[tc.now.UID].Err != nil || len(again[tc.now.UID].Devices) != 1 || again[tc.now.UID].Devices[0].DeviceName != wantDevice {
				t.Errorf("asked again: %+v", again[tc.now.UID])
			}
		})
	}
}

// specFileOf is the name of the spec file holding claim device id.
func specFileOf(id string) string {
	return cdi.GenerateTransientSpecName("claim.gpu.qgpu.io", "slice", id) + ".yaml"
}

// TestPrepareCountsDeviceGrants: on a node whose device plugins granted
// slices to pods still running (it was switched to DRA under them), a
// claim counts those grants on its card: one card, one budget. A refusal
// seen with the informer's pods is asked again with a fresh list.
func TestPrepareCountsDeviceGrants(t *testing.T) {
	grant := func(resource string, class protocol.Class, mem, cores int64) store.Grant {
		return store.Grant{PodUID: "pod-uid", Namespace: "ns", Name: "pod", Container: "main", Resource: resource, Class: class,
			Slices: []protocol.Slice{{Index: 0, UUID: testCards[0].UUID, MemoryGiB: mem, Cores: cores}}}
	}
	general := []store.Grant{grant(protocol.ResourceMemory, protocol.ClassGeneral, 10, 60), grant(protocol.ResourceCore, protocol.ClassGeneral, 10, 60)}
	cases := []struct {
		name          string
		cached, fresh []store.Grant
		claim         *resourceapi.ResourceClaim
		want          string // in the refusal; "": prepared
	}{
		{"memory beside a grant", general, general, makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 10, 10)),
			"10 GiB already held + 10 GiB asked > the card's 15 GiB (held by ns/pod/main 10 GiB)"},
		{"cores beside a grant", general, general, makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 4, 50)),
			"60 cores already held + 50 cores asked > the card's 100 cores (held by ns/pod/main 60 cores)"},
		{"fits beside a grant", general, general, makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 5, 40)), ""},
		{"online beside a general grant", general, general, makeClaim("c", configs(protocol.ClassOnline), result("gpu", 0, 2, 0)),
			"an online slice never shares a card with general ones (held by ns/pod/main general)"},
		{"the pod is gone by a fresh list", general, nil, makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 10, 40)), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, _ := cdiNode(t)
			d := newTestDriver(t, specs, filepath.Join(t.TempDir(), "cp.json"), enforce.Env{}, protocol.PolicyBestEffort)
			d.cfg.DeviceGrants = func(_ context.Context, fresh bool) ([]store.Grant, error) {
				if fresh {
					return tc.fresh, nil
				}
				return tc.cached, nil
			}
			err := prepareOne(t, d, tc.claim)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("prepare: %v", err)
			case tc.want != "" && (!errors.Is(err, cardbudget.ErrOverCapacity) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("prepare: %v, want ErrOverCapacity saying %q", err, tc.want)
			}
		})
	}
}

// TestPrepareReallocatedShareID: the checkpoint records the allocation a
// claim was prepared from, share ID included; one that differs only in
// its share ID is prepared again and recorded anew, one that does not is
// answered from the checkpoint even by a driver whose backend now fails.
func TestPrepareReallocatedShareID(t *testing.T) {
	specs, _ := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	d := newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort)
	old := makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 4, 30))
	old.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-1"))
	now := old.DeepCopy()
	now.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-2"))
	for _, c := range []*resourceapi.ResourceClaim{old, now} {
		if err := prepareOne(t, d, c); err != nil {
			t.Fatal(err)
		}
		onDisk, _ := (Checkpoint{Path: cp}).Load()
		got := onDisk[c.UID].Allocation
		if got == nil || !equality.Semantic.DeepEqual(*got, *allocationOf(c)) {
			t.Errorf("checkpointed allocation %+v, want %+v", got, allocationOf(c))
		}
	}
	restarted := newTestDriver(t, specs, cp, failing{}, protocol.PolicyBestEffort)
	if err := prepareOne(t, restarted, now); err != nil {
		t.Errorf("the same allocation after a restart: %v, want the checkpoint's answer", err)
	}
}

// TestPrepareAfterUpgrade: a version-1 checkpoint recorded no allocation;
// its claims are compared by what they were prepared as: the same card,
// capacity and class are answered from it, another is prepared again.
func TestPrepareAfterUpgrade(t *testing.T) {
	specs, _ := cdiNode(t)
	cp := filepath.Join(t.TempDir(), "cp.json")
	claim := makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 0, 4, 30))
	if err := prepareOne(t, newTestDriver(t, specs, cp, enforce.Env{}, protocol.PolicyBestEffort), claim); err != nil {
		t.Fatal(err)
	}
	onDisk, err := (Checkpoint{Path: cp}).Load()
	if err != nil {
		t.Fatal(err)
	}
	p := onDisk[claim.UID]
	p.Allocation = nil
	raw, err := json.Marshal(map[string]any{"version": 1, "claims": []Prepared{p}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// The backend fails: only an answer from the checkpoint succeeds.
	upgraded := newTestDriver(t, specs, cp, failing{}, protocol.PolicyBestEffort)
	if err := prepareOne(t, upgraded, claim); err != nil {
		t.Fatalf("the same allocation: %v, want the checkpoint's answer", err)
	}
	moved := makeClaim("c", configs(protocol.ClassGeneral), result("gpu", 1, 4, 30))
	if err := prepareOne(t, upgraded, moved); err == nil {
		t.Fatal("another card answered from the checkpoint, want it prepared again (by the failing backend)")
	}
}
