package inventory

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func cards() []protocol.Card {
	return []protocol.Card{
		{Index: 1, UUID: "GPU-b", Model: "Tesla T4", MemoryMiB: 15109, Healthy: true},
		{Index: 0, UUID: "GPU-a", Model: "Tesla T4", MemoryMiB: 15109, Healthy: true},
	}
}

func TestBuild(t *testing.T) {
	inv := Build(cards())
	if inv.Version != protocol.InventoryVersion || inv.Cards[0].Index != 0 || inv.Cards[1].Index != 1 {
		t.Errorf("inventory %+v", inv)
	}
	if errs := inv.Validate(); len(errs) != 0 {
		t.Error(errs)
	}
	if empty := Build(nil); empty.Cards == nil || len(empty.Validate()) != 0 {
		t.Errorf("no cards: %+v (a node without cards still publishes an empty list)", empty)
	}
}

func TestTrackerHealth(t *testing.T) {
	tr := NewTracker(cards())
	var mu sync.Mutex
	var seen [][]protocol.Card
	tr.Subscribe(func(c []protocol.Card) { mu.Lock(); seen = append(seen, c); mu.Unlock() })
	if !tr.SetHealth("GPU-a", false, "test") || tr.SetHealth("GPU-a", false, "test") || tr.SetHealth("GPU-zz", false, "test") {
		t.Fatal("SetHealth reported the wrong changes")
	}
	if len(seen) != 1 || seen[0][1].Healthy {
		t.Errorf("subscriber saw %+v", seen)
	}
	if c, _ := tr.ByUUID("GPU-a"); c.Healthy {
		t.Error("card still healthy")
	}
	// Concurrent readers and writers (run with -race).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.SetHealth("GPU-b", i%2 == 0, "test")
			_ = tr.Inventory()
		}()
	}
	wg.Wait()
}

func TestPublish(t *testing.T) {
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{"keep": "me"}}}
	client := fake.NewClientset(node)
	inv := Build(cards())
	if err := Publish(ctx, client, "n1", inv); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	decoded, err := protocol.DecodeInventory([]byte(got.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inv, decoded); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.Annotations["keep"] != "me" {
		t.Error("other annotations lost")
	}
	if err := Publish(ctx, client, "missing", inv); err == nil {
		t.Error("missing node: no error")
	}
}

// TestGrantable: an unhealthy card is refused with its index, UUID and why;
// a healthy or unknown one is not the tracker's to refuse.
func TestGrantable(t *testing.T) {
	tr := NewTracker(cards())
	tr.SetHealth("GPU-b", false, "NVML reported critical Xid 79")
	for _, tc := range []struct {
		uuid, want string
	}{
		{"GPU-a", ""},
		{"GPU-zz", ""},
		{"GPU-b", "card 1 (GPU-b): NVML reported critical Xid 79"},
	} {
		err := tr.Grantable(tc.uuid)
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.uuid, err, tc.want)
		}
	}
	tr.SetHealth("GPU-b", true, "")
	if err := tr.Grantable("GPU-b"); err != nil {
		t.Errorf("healed card: %v", err)
	}
}
