package inventory

import (
	"errors"

	"context"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestPublisher: the first publish waits for the Node to be registered
// (two NotFound answers), then every Trigger republishes the tracker's
// current cards, and each inventory written is reported.
func TestPublisher(t *testing.T) {
	old := registrationPoll
	registrationPoll = time.Millisecond
	t.Cleanup(func() { registrationPoll = old })
	client := fake.NewClientset()
	patches := 0
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches == 2 { // the kubelet registers the Node between two attempts
			_, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "n1")
			if err != nil {
				if err := client.Tracker().Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
					t.Error(err)
				}
			}
		}
		return false, nil, nil
	})
	tr := NewTracker(cards())
	published := make(chan *protocol.Inventory, 4)
	p := NewPublisher(client, "n1", tr, func(inv *protocol.Inventory) { published <- inv })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.PublishWhenRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if patches < 2 {
		t.Errorf("%d patches: want the publish to have waited for the Node", patches)
	}
	if inv := <-published; len(inv.Cards) != 2 || !inv.Cards[1].Healthy {
		t.Errorf("first inventory %+v", inv)
	}
	go p.Run(ctx)
	tr.SetHealth("GPU-b", false, "test")
	p.Trigger()
	inv := <-published
	if inv.Cards[1].Healthy {
		t.Errorf("republished inventory %+v: card 1 should be unhealthy", inv)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := protocol.DecodeInventory([]byte(node.Annotations[protocol.AnnotationInventory]))
	if err != nil || got.Cards[1].Healthy {
		t.Errorf("Node annotation %+v %v: want card 1 unhealthy", got, err)
	}
}

// TestPublishWhenRegisteredStopsOnOtherErrors: only NotFound is waited out.
func TestPublishWhenRegisteredStopsOnOtherErrors(t *testing.T) {
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errForbidden
	})
	p := NewPublisher(client, "n1", NewTracker(cards()), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.PublishWhenRegistered(ctx); err == nil || ctx.Err() != nil {
		t.Errorf("forbidden: %v (ctx %v), want the error at once", err, ctx.Err())
	}
}

var errForbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no"))
