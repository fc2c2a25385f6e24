package nvml

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func invOf(cards []protocol.Card) *protocol.Inventory {
	return &protocol.Inventory{Version: protocol.InventoryVersion, Cards: cards}
}

func TestDiscoverFake(t *testing.T) {
	cards, _ := ParseFakeSpec("2xA100-80G,1xT4")
	d, err := Open(NewFake(cards, "n1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := d.Cards()
	if len(got) != 3 {
		t.Fatalf("%d cards", len(got))
	}
	if got[2].Model != "Tesla T4" || got[2].MemoryMiB != 15109 || got[2].MemoryGiB() != 14 || !got[2].Healthy || got[2].Index != 2 {
		t.Errorf("card 2: %+v", got[2])
	}
	if errs := invOf(got).Validate(); len(errs) != 0 {
		t.Errorf("inventory: %v", errs)
	}
	// UUIDs are stable per node and differ between nodes.
	again, _ := Open(NewFake(cards, "n1", ""))
	other, _ := Open(NewFake(cards, "n2", ""))
	if again.Cards()[0].UUID != got[0].UUID || other.Cards()[0].UUID == got[0].UUID {
		t.Errorf("UUIDs: %s %s %s", got[0].UUID, again.Cards()[0].UUID, other.Cards()[0].UUID)
	}
	// Fake card N is /dev/nvidiaN.
	for _, c := range got {
		if m, ok := d.Minor(c.UUID); !ok || m != c.Index {
			t.Errorf("card %d: minor %d, %v", c.Index, m, ok)
		}
	}
	if _, ok := d.Minor("GPU-unknown"); ok {
		t.Error("a minor number for an unknown UUID")
	}
}

func TestDiscoverDGXA100Mock(t *testing.T) {
	d, err := Open(dgxa100.New())
	if err != nil {
		t.Fatal(err)
	}
	got := d.Cards()
	if len(got) != 8 || got[7].MemoryMiB != 40960 || got[7].Index != 7 {
		t.Fatalf("cards: %+v", got)
	}
	if m, ok := d.Minor(got[7].UUID); !ok || m != 7 {
		t.Errorf("card 7: minor %d, %v (from NVML's GetMinorNumber)", m, ok)
	}
}

func TestOpenErrors(t *testing.T) {
	lib := NewFake(nil, "n", "")
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := Open(lib); !errors.Is(err, ErrNoNVML) {
		t.Errorf("no library: got %v", err)
	}
	cards, _ := ParseFakeSpec("1xT4")
	broken := NewFake(cards, "n", "")
	broken.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, err := Open(broken); err == nil {
		t.Errorf("broken count: no error")
	}
}

func TestStartWithBrokenCard(t *testing.T) {
	cards, _ := ParseFakeSpec("2xT4")
	fake := NewFake(cards, "n", "")
	fake.SetHealthy(1, false)
	d, err := Open(fake)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan HealthEvent, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.WatchHealth(ctx, time.Hour, func(e HealthEvent) { events <- e })
	select {
	case e := <-events:
		if e.Index != 1 || e.Healthy {
			t.Errorf("event %+v", e)
		}
	case <-time.After(time.Minute): // a hang, not a slow machine
		t.Fatal("the broken card was not reported by the first poll")
	}
}

func TestWatchHealth(t *testing.T) {
	cards, _ := ParseFakeSpec("3xT4")
	healthFile := filepath.Join(t.TempDir(), "unhealthy")
	fake := NewFake(cards, "n", healthFile)
	d, err := Open(fake)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.WatchHealth(ctx, 50*time.Millisecond, func(e HealthEvent) { events <- e })

	expect := func(index int, healthy bool) {
		t.Helper()
		select {
		case e := <-events:
			if e.Index != index || e.Healthy != healthy || e.UUID != fake.UUID(index) {
				t.Fatalf("event %+v, want card %d healthy=%v", e, index, healthy)
			}
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatalf("no event for card %d healthy=%v", index, healthy)
		}
	}
	fake.SetHealthy(1, false)
	expect(1, false)
	fake.SetHealthy(1, true)
	expect(1, true)
	os.WriteFile(healthFile, []byte(fake.UUID(2)+"\n"), 0o600)
	expect(2, false)
	os.Remove(healthFile)
	expect(2, true)
	fake.InjectXid(0, 43) // an application error: ignored
	fake.InjectXid(0, 79) // fallen off the bus
	expect(0, false)
	// Asserting absence: a slow machine sees fewer polls, never more events.
	select {
	case e := <-events:
		t.Fatalf("unexpected event %+v (a critical Xid is sticky)", e)
	case <-time.After(200 * time.Millisecond):
	}
}
