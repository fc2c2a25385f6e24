package allocate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// t4Cards are two 16 GB T4s as NVML reports them: 14 GiB each.
func t4Cards() []protocol.Card {
	return []protocol.Card{
		{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15109, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: "Tesla T4", MemoryMiB: 15109, Healthy: true},
	}
}

// Regression (issue 13, last line): two pods whose assignments both put 10
// GiB on card 0, as a ledger bug or an assignment written past the admission
// policy would. The agent grants the first and refuses the second, with an
// event on the pod and an error naming the card and the amounts.
func TestAllocateRefusesForgedAssignmentOverCapacity(t *testing.T) {
	ctx := context.Background()
	first, second := general("first", 0, 10, 50, 0), general("second", 1, 10, 40, 0)
	pods := &fakePods{cached: []*v1.Pod{first, second}, fresh: []*v1.Pod{first, second}}
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), pods)
	a.Cards = t4Cards
	rec := record.NewFakeRecorder(4)
	a.Recorder = rec
	if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m1", 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, protocol.ResourceCore, ids("c1", 50)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allocate(ctx, protocol.ResourceMemory, ids("m2", 10))
	if !errors.Is(err, ErrOverCapacity) {
		t.Fatalf("second pod's memory: err = %v, want ErrOverCapacity", err)
	}
	for _, want := range []string{"default/second", "card 0 (GPU-0)", "10 GiB already held + 10 GiB asked > the card's 14 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, ReasonOverCapacity) || !strings.Contains(ev, "GPU-0") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event recorded for the refused grant")
	}
	grants, _ := a.Store.List()
	for _, g := range grants {
		if g.PodUID == "uid-second" {
			t.Errorf("refused grant was stored: %+v", g)
		}
	}
}

func TestCheckCapacity(t *testing.T) {
	grant := func(uid, container, resource string, class protocol.Class, s ...protocol.Slice) store.Grant {
		return store.Grant{PodUID: uid, Container: container, Resource: resource, Class: class, Slices: s}
	}
	live := map[string]bool{"a": true, "b": true}
	tests := []struct {
		name    string
		granted []store.Grant
		g       store.Grant
		wantErr string
	}{
		{"fits", []store.Grant{grant("a", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 4, 50)), ""},
		{"memory over", []store.Grant{grant("a", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 5, 50)), "10 GiB already held + 5 GiB asked > the card's 14 GiB"},
		{"general cores over", []store.Grant{grant("a", "c", protocol.ResourceCore, protocol.ClassGeneral, slice(0, 1, 60))},
			grant("b", "c", protocol.ResourceCore, protocol.ClassGeneral, slice(0, 1, 50)), "60 cores already held + 50 cores asked > the card's 100 cores"},
		{"offline greedy over", []store.Grant{grant("a", "c", protocol.ResourceCoreGreedy, protocol.ClassOffline, slice(1, 1, 80))},
			grant("b", "c", protocol.ResourceCoreGreedy, protocol.ClassOffline, slice(1, 1, 30)), "card 1 (GPU-1): 80 cores"},
		{"other card", []store.Grant{grant("a", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(1, 10, 50)), ""},
		{"terminated pod's grant does not count", []store.Grant{grant("gone", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50)), ""},
		{"the grant being replaced does not count", []store.Grant{grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 10, 50)), ""},
		{"one pod over by itself", nil,
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 8, 50), slice(0, 8, 50)), "8 GiB already held + 8 GiB asked"},
		{"general beside online", []store.Grant{grant("a", "c", protocol.ResourceMemory, protocol.ClassOnline, slice(1, 2, 0))},
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(1, 2, 10)), "a general slice never shares a card with online or offline ones"},
		{"a pod's core grant beside its memory grant", []store.Grant{grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 14, 100))},
			grant("b", "c", protocol.ResourceCore, protocol.ClassGeneral, slice(0, 14, 100)), ""},
		{"unknown card", nil,
			grant("b", "c", protocol.ResourceMemory, protocol.ClassGeneral, protocol.Slice{Index: 7, UUID: "GPU-forged", MemoryGiB: 1}), "names card 7 (GPU-forged), which this node does not have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkCapacity(t4Cards(), tt.granted, live, tt.g)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tt.wantErr != "" && (!errors.Is(err, ErrOverCapacity) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want ErrOverCapacity saying %q", err, tt.wantErr)
			}
		})
	}
}
