package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// TestMIGCardsNotAdvertised: a card in MIG mode (or about to be) is left
// out of the cards, named with why in Skipped, and refused by Grantable;
// so is a card whose MIG mode is turned on after discovery.
func TestMIGCardsNotAdvertised(t *testing.T) {
	cards, _ := ParseFakeSpec("4xA100-80G")
	fake := NewFake(cards, "n1", "")
	fake.SetMIG(1, nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE)
	fake.SetMIG(2, nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE)
	d, err := Open(fake)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got []int
	for _, c := range d.Cards() {
		got = append(got, c.Index)
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 3 {
		t.Fatalf("advertised cards %v, want [0 3]", got)
	}
	skipped := d.Skipped()
	if len(skipped) != 2 || skipped[0].Index != 1 || !strings.Contains(skipped[0].Reason, "MIG mode is enabled") ||
		skipped[1].Index != 2 || !strings.Contains(skipped[1].Reason, "pending") {
		t.Errorf("skipped %+v", skipped)
	}
	for _, tc := range []struct {
		name, uuid, want string
	}{
		{"whole card", fake.UUID(0), ""},
		{"MIG card", fake.UUID(1), "MIG mode is enabled"},
		{"unknown card", "GPU-nope", "not one of this node's cards"},
	} {
		err := d.Grantable(tc.uuid)
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrNotGrantable) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	fake.SetMIG(3, nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE)
	if err := d.Grantable(fake.UUID(3)); !errors.Is(err, ErrNotGrantable) {
		t.Errorf("card 3 after MIG was turned on: %v", err)
	}
}

// TestMIGOnDGXA100Mock: go-nvml's eight-A100 mock with MIG on one card.
func TestMIGOnDGXA100Mock(t *testing.T) {
	lib := dgxa100.New()
	dev, _ := lib.DeviceGetHandleByIndex(5)
	dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	d, err := Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Cards()); n != 7 {
		t.Errorf("%d cards advertised, want 7", n)
	}
	if s := d.Skipped(); len(s) != 1 || s[0].Index != 5 {
		t.Errorf("skipped %+v, want card 5", s)
	}
}

// TestEventWaitErrorMarksEveryCardUnhealthy: an unexpected error from the
// event wait makes every card unhealthy (its critical errors can no longer
// be seen); once the event set opens again at the next poll, the cards
// are healthy again, except one with a sticky critical Xid.
func TestEventWaitErrorMarksEveryCardUnhealthy(t *testing.T) {
	cards, _ := ParseFakeSpec("3xT4")
	fake := NewFake(cards, "n", "")
	d, err := Open(fake)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A poll interval long enough that the error is seen before the reopen.
	go d.WatchHealth(ctx, 300*time.Millisecond, func(e HealthEvent) { events <- e })
	next := func() HealthEvent {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatal("no health event")
			return HealthEvent{}
		}
	}
	fake.InjectXid(2, 79)
	if e := next(); e.Index != 2 || e.Healthy {
		t.Fatalf("event %+v, want card 2 unhealthy", e)
	}
	fake.InjectEventWaitError(nvml.ERROR_UNKNOWN)
	down := map[int]string{}
	for len(down) < 2 {
		e := next()
		if e.Healthy {
			t.Fatalf("event %+v while every card should go down", e)
		}
		down[e.Index] = e.Reason
	}
	for _, i := range []int{0, 1} {
		if !strings.Contains(down[i], "waiting for NVML events failed") {
			t.Errorf("card %d reason %q", i, down[i])
		}
	}
	up := map[int]bool{}
	for len(up) < 2 {
		e := next()
		if !e.Healthy || e.Index == 2 {
			t.Fatalf("event %+v, want cards 0 and 1 healthy again", e)
		}
		up[e.Index] = true
	}
}
