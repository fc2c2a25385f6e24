package allocate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestAllocatorRefusesUngrantableCard: a first grant and a re-issued one
// on a card that is unhealthy or in MIG mode are refused, naming the card
// and why, and nothing is recorded; a healthy card is granted.
func TestAllocatorRefusesUngrantableCard(t *testing.T) {
	errMIG := errors.New("card 2 (GPU-2): MIG mode is enabled")
	for _, tc := range []struct {
		name string
		card int
		want string // "" for granted
	}{
		{"healthy", 0, ""},
		{"unhealthy", 1, "card 1 (GPU-1): NVML reported critical Xid 79"},
		{"MIG", 2, "MIG mode is enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := running(general("p", 0, 4, 30, tc.card))
			a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}})
			tracker := inventory.NewTracker([]protocol.Card{
				{Index: 0, UUID: "GPU-0", MemoryMiB: 16384, Healthy: true},
				{Index: 1, UUID: "GPU-1", MemoryMiB: 16384, Healthy: true},
			})
			tracker.SetHealth("GPU-1", false, "NVML reported critical Xid 79")
			a.Grantable = func(uuid string) error {
				if err := tracker.Grantable(uuid); err != nil {
					return err
				}
				if uuid == "GPU-2" {
					return errMIG
				}
				return nil
			}
			_, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("m", 4))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrCardNotGrantable) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "default/p container main") {
				t.Errorf("err %v, want ErrCardNotGrantable naming the pod and %q", err, tc.want)
			}
			if _, ok, _ := a.Store.Get("uid-p", "main", protocol.ResourceMemory); ok {
				t.Error("a refused grant was recorded")
			}
		})
	}
}

// TestReissueOnUnhealthyCardRefused: a container whose card went bad is
// not started again on it when the kubelet re-issues its Allocate.
func TestReissueOnUnhealthyCardRefused(t *testing.T) {
	p := running(general("p", 0, 4, 30, 0))
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{p}, fresh: []*v1.Pod{p}})
	k := newDeviceKubelet("p")
	a.Kubelet = k
	admit(t, a, k, "p", "old")
	k.forget("p")
	a.Grantable = func(uuid string) error { return fmt.Errorf("card 0 (%s): NVML health query failed", uuid) }
	if _, err := a.Allocate(context.Background(), protocol.ResourceMemory, ids("new", 4)); !errors.Is(err, ErrCardNotGrantable) {
		t.Errorf("re-issue on a bad card: %v, want ErrCardNotGrantable", err)
	}
}
