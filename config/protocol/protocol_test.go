package protocol

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cards returns n healthy cards of gib GiB, indexes 0..n-1.
func cards(n int, gib int64) []Card {
	out := make([]Card, n)
	for i := range out {
		out[i] = Card{Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: gib * GiB, Healthy: true}
	}
	return out
}

func inventory(cs ...Card) *Inventory { return &Inventory{Version: InventoryVersion, Cards: cs} }

func slice(index int, mem, cores int64) Slice {
	return Slice{Index: index, UUID: fmt.Sprintf("GPU-%08d", index), MemoryGiB: mem, Cores: cores}
}

func assignment(class Class, cs ...ContainerAssignment) *Assignment {
	return &Assignment{Version: AssignmentVersion, PodUID: "uid-1", Node: "n1", Class: class, Containers: cs}
}

func container(name string, ss ...Slice) ContainerAssignment {
	return ContainerAssignment{Name: name, Slices: ss}
}

func TestInventoryRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		inv  *Inventory
	}{
		{"no cards", inventory()},
		{"eight cards", inventory(cards(8, 40)...)},
		{"unhealthy card, odd memory, unicode model", func() *Inventory {
			cs := cards(2, 16)
			cs[1].Healthy, cs[1].MemoryMiB, cs[1].Model = false, 15360+7, "Tesla T4 <β>"
			return inventory(cs...)
		}()},
		{"max cards", inventory(cards(MaxCards, 80)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.inv.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := DecodeInventory([]byte(s))
			if err != nil {
				t.Fatalf("DecodeInventory(%s): %v", s, err)
			}
			if diff := cmp.Diff(tt.inv, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		a    *Assignment
	}{
		{"general two containers on two cards", assignment(ClassGeneral, container("a", slice(0, 4, 30)), container("b", slice(1, 2, 20)))},
		{"general two containers share a card", assignment(ClassGeneral, container("a", slice(0, 4, 30)), container("b", slice(0, 2, 20)))},
		{"general whole cards", assignment(ClassGeneral, container("a", slice(0, 16, 100), slice(3, 16, 100)))},
		{"online", assignment(ClassOnline, container("a", slice(2, 8, 0)), container("b", slice(2, 1, 0)))},
		{"offline", assignment(ClassOffline, container("a", slice(2, 8, 60)), container("b", slice(2, 1, 40)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.a.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := DecodeAssignment([]byte(s))
			if err != nil {
				t.Fatalf("DecodeAssignment(%s): %v", s, err)
			}
			if diff := cmp.Diff(tt.a, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContainerTotal(t *testing.T) {
	mem, cores := container("a", slice(0, 16, 100), slice(1, 16, 100)).Total()
	if mem != 32 || cores != 200 {
		t.Errorf("Total = %d, %d; want 32, 200", mem, cores)
	}
}

func TestCardMemoryGiB(t *testing.T) {
	for _, tt := range []struct{ mib, want int64 }{{1024, 1}, {2047, 1}, {15360, 15}, {40960, 40}, {81920 - 1, 79}} {
		if got := (Card{MemoryMiB: tt.mib}).MemoryGiB(); got != tt.want {
			t.Errorf("MemoryGiB(%d MiB) = %d, want %d", tt.mib, got, tt.want)
		}
	}
}

// invJSON is a valid inventory, changed by mutate, as JSON (not validated).
func invJSON(mutate func(*Inventory)) string {
	inv := inventory(cards(2, 32)...)
	mutate(inv)
	return mustJSON(inv)
}

func TestDecodeInventoryRejects(t *testing.T) {
	good := invJSON(func(*Inventory) {})
	tests := []struct {
		name   string
		data   string
		wantIn []string
	}{
		{"unknown field", strings.Replace(good, `"version"`, `"extra":1,"version"`, 1), []string{"unknown field", `"extra"`}},
		{"unknown card field", strings.Replace(good, `"index":0`, `"index":0,"temp":50`, 1), []string{"unknown field", `"temp"`}},
		{"trailing data", good + ` {}`, []string{"trailing data"}},
		{"trailing garbage", good + `x`, []string{"trailing data"}},
		{"two objects", good + good, []string{"trailing data"}},
		{"oversized", good[:len(good)-1] + `,"pad":"` + strings.Repeat(" ", MaxAnnotationBytes) + `"}`, []string{"too large"}},
		{"not JSON", `{"version":`, []string{"decoding JSON"}},
		{"empty", ``, []string{"decoding JSON"}},
		{"wrong type", strings.Replace(good, `"index":0`, `"index":"0"`, 1), []string{"decoding JSON", "index"}},
		{"null", `null`, []string{"version"}},
		{"wrong version", invJSON(func(i *Inventory) { i.Version = "qgpu.io/v2" }), []string{"version", "qgpu.io/v2"}},
		{"missing version", invJSON(func(i *Inventory) { i.Version = "" }), []string{"version"}},
		{"duplicate index", invJSON(func(i *Inventory) { i.Cards[1].Index = 0 }), []string{"cards[1].index", "Duplicate", "0"}},
		{"duplicate UUID", invJSON(func(i *Inventory) { i.Cards[1].UUID = i.Cards[0].UUID }), []string{"cards[1].uuid", "Duplicate", "GPU-00000000"}},
		{"negative index", invJSON(func(i *Inventory) { i.Cards[1].Index = -1 }), []string{"cards[1].index", "-1"}},
		{"index too large", invJSON(func(i *Inventory) { i.Cards[1].Index = MaxCards }), []string{"cards[1].index", "64"}},
		{"empty UUID", invJSON(func(i *Inventory) { i.Cards[0].UUID = "" }), []string{"cards[0].uuid"}},
		{"long UUID", invJSON(func(i *Inventory) { i.Cards[0].UUID = strings.Repeat("u", 129) }), []string{"cards[0].uuid"}},
		{"long model", invJSON(func(i *Inventory) { i.Cards[0].Model = strings.Repeat("m", 129) }), []string{"cards[0].model"}},
		{"memory below 1 GiB", invJSON(func(i *Inventory) { i.Cards[0].MemoryMiB = 1023 }), []string{"cards[0].memoryMiB", "1023"}},
		{"negative memory", invJSON(func(i *Inventory) { i.Cards[0].MemoryMiB = -1 }), []string{"cards[0].memoryMiB", "-1"}},
		{"memory too large", invJSON(func(i *Inventory) { i.Cards[0].MemoryMiB = 16<<20 + 1 }), []string{"cards[0].memoryMiB", "16777217"}},
		{"more than MaxCards", invJSON(func(i *Inventory) { i.Cards = cards(MaxCards+1, 1) }), []string{"cards", "65"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInventory([]byte(tt.data))
			if err == nil {
				t.Fatalf("DecodeInventory = %+v, want an error", got)
			}
			if got != nil {
				t.Errorf("DecodeInventory returned %+v with the error", got)
			}
			msg := err.Error()
			if !strings.Contains(msg, AnnotationInventory) {
				t.Errorf("error %q does not name the annotation", msg)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not name %q", msg, s)
				}
			}
		})
	}
}

func TestDecodeTooLargeIsSentinel(t *testing.T) {
	big := make([]byte, MaxAnnotationBytes+1)
	if _, err := DecodeInventory(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("DecodeInventory: %v, want ErrTooLarge", err)
	}
	if _, err := DecodeAssignment(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("DecodeAssignment: %v, want ErrTooLarge", err)
	}
}

func TestEncodeValidates(t *testing.T) {
	if _, err := (&Inventory{Version: "v0"}).Encode(); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("Inventory.Encode of a bad inventory: %v", err)
	}
	if _, err := assignment(ClassGeneral).Encode(); err == nil || !strings.Contains(err.Error(), "containers") {
		t.Errorf("Assignment.Encode of a bad assignment: %v", err)
	}
}

func asgJSON(class Class, mutate func(*Assignment)) string {
	a := assignment(class, container("a", slice(0, 4, 30)), container("b", slice(1, 2, 20)))
	mutate(a)
	return mustJSON(a)
}

func TestDecodeAssignmentRejects(t *testing.T) {
	good := asgJSON(ClassGeneral, func(*Assignment) {})
	none := func(*Assignment) {}
	tests := []struct {
		name   string
		data   string
		wantIn []string
	}{
		{"unknown field", strings.Replace(good, `"version"`, `"cards":[],"version"`, 1), []string{"unknown field", `"cards"`}},
		{"unknown slice field", strings.Replace(good, `"index":0`, `"index":0,"minor":3`, 1), []string{"unknown field", `"minor"`}},
		{"trailing data", good + `[]`, []string{"trailing data"}},
		{"oversized", good + strings.Repeat(" ", MaxAnnotationBytes), []string{"too large"}},
		{"wrong version", asgJSON(ClassGeneral, func(a *Assignment) { a.Version = "v1" }), []string{"version", `"v1"`}},
		{"no pod UID", asgJSON(ClassGeneral, func(a *Assignment) { a.PodUID = "" }), []string{"podUID"}},
		{"no node", asgJSON(ClassGeneral, func(a *Assignment) { a.Node = "" }), []string{"node"}},
		{"bad class", asgJSON("batch", none), []string{"class", `"batch"`}},
		{"no containers", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers = nil }), []string{"containers", "0"}},
		{"65 containers", asgJSON(ClassGeneral, func(a *Assignment) {
			for i := range 63 {
				a.Containers = append(a.Containers, container(fmt.Sprint("c", i), slice(0, 1, 1)))
			}
		}), []string{"containers", "65"}},
		{"no container name", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Name = "" }), []string{"containers[1].name"}},
		{"no slices", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[0].Slices = nil }), []string{"containers[0].slices", "0"}},
		{"more than MaxCards slices", asgJSON(ClassGeneral, func(a *Assignment) {
			a.Containers[0].Slices = nil
			for i := range MaxCards + 1 {
				a.Containers[0].Slices = append(a.Containers[0].Slices, slice(i, 1, 100))
			}
		}), []string{"containers[0].slices", "65"}},
		{"negative index", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[0].Slices[0].Index = -1 }), []string{"containers[0].slices[0].index", "-1"}},
		{"index too large", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[0].Slices[0].Index = 64 }), []string{"containers[0].slices[0].index", "64"}},
		{"no UUID", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Slices[0].UUID = "" }), []string{"containers[1].slices[0].uuid"}},
		{"zero memory", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Slices[0].MemoryGiB = 0 }), []string{"containers[1].slices[0].memoryGiB", "0"}},
		{"huge memory", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Slices[0].MemoryGiB = 16385 }), []string{"containers[1].slices[0].memoryGiB", "16385"}},
		{"negative cores", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[0].Slices[0].Cores = -1 }), []string{"containers[0].slices[0].cores", "-1"}},
		{"cores over 100", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[0].Slices[0].Cores = 101 }), []string{"containers[0].slices[0].cores", "101"}},
		{"one container twice on one card", asgJSON(ClassGeneral, func(a *Assignment) {
			a.Containers[0].Slices = []Slice{slice(0, 8, 100), slice(0, 8, 100)}
		}), []string{"containers[0].slices[1].index", "Duplicate"}},
		{"one index, two UUIDs", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Slices[0].Index = 0 }), []string{"containers[1].slices[0].uuid", "GPU-00000001"}},
		{"one UUID, two indexes", asgJSON(ClassGeneral, func(a *Assignment) { a.Containers[1].Slices[0].UUID = "GPU-00000000" }), []string{"containers[1].slices[0].index", "1"}},
		{"online with cores", asgJSON(ClassOnline, func(a *Assignment) {
			a.Containers = []ContainerAssignment{container("a", slice(0, 4, 10))}
		}), []string{"containers[0].slices[0].cores", "10"}},
		{"online on two cards", asgJSON(ClassOnline, func(a *Assignment) {
			a.Containers = []ContainerAssignment{container("a", slice(0, 4, 0)), container("b", slice(1, 4, 0))}
		}), []string{"containers[1].slices[0].index", "1"}},
		{"offline container with two slices", asgJSON(ClassOffline, func(a *Assignment) {
			a.Containers = []ContainerAssignment{container("a", slice(0, 4, 10), slice(1, 4, 10))}
		}), []string{"containers[0].slices", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeAssignment([]byte(tt.data))
			if err == nil {
				t.Fatalf("DecodeAssignment = %+v, want an error", got)
			}
			if got != nil {
				t.Errorf("DecodeAssignment returned %+v with the error", got)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestParseClass(t *testing.T) {
	tests := []struct {
		value   string
		present bool
		want    Class
		wantErr bool
	}{
		{"", false, ClassGeneral, false},
		{"anything", false, ClassGeneral, false},
		{"online", true, ClassOnline, false},
		{"offline", true, ClassOffline, false},
		{"", true, "", true},
		{"general", true, "", true},
		{"Online", true, "", true},
		{"batch", true, "", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%v", tt.value, tt.present), func(t *testing.T) {
			got, err := ParseClass(tt.value, tt.present)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseClass = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil && (!strings.Contains(err.Error(), AnnotationAppClass) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.value))) {
				t.Errorf("error %q does not name the annotation and the value", err)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		value   string
		want    Policy
		wantErr bool
	}{
		{"", PolicyBestEffort, false},
		{"  ", PolicyBestEffort, false},
		{"best-effort", PolicyBestEffort, false},
		{"be", PolicyBestEffort, false},
		{"fixed-share", PolicyFixedShare, false},
		{"fs", PolicyFixedShare, false},
		{"burst-share", PolicyBurstShare, false},
		{"bs", PolicyBurstShare, false},
		{"Fixed-Share", PolicyFixedShare, false},
		{" FS ", PolicyFixedShare, false},
		{"fixed", DefaultPolicy, true},
		{"best_effort", DefaultPolicy, true},
		{"b", DefaultPolicy, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.value), func(t *testing.T) {
			got, err := ParsePolicy(tt.value)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParsePolicy = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil && (!strings.Contains(err.Error(), LabelSchedulePolicy) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.value))) {
				t.Errorf("error %q does not name the label and the value", err)
			}
		})
	}
}
