package inventory

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/internal/apiretry"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// publishAttempts is how many times one republish is tried; the next
// health change triggers another.
const publishAttempts = 5

// registrationPoll is how often the Node is looked for before the first
// publish.
var registrationPoll = 250 * time.Millisecond

// Publisher keeps the Node's inventory annotation equal to the tracker's
// cards. Only the latest state matters, so triggers coalesce.
type Publisher struct {
	client  kubernetes.Interface
	node    string
	tracker *Tracker
	kick    chan struct{}
	// published, if set, is called with every inventory written.
	published func(*protocol.Inventory)
}

// NewPublisher returns a publisher of tracker's cards on node; published,
// if not nil, is told of every inventory written.
func NewPublisher(client kubernetes.Interface, node string, tracker *Tracker, published func(*protocol.Inventory)) *Publisher {
	return &Publisher{client: client, node: node, tracker: tracker, kick: make(chan struct{}, 1), published: published}
}

// PublishWhenRegistered publishes the inventory once, waiting while the
// Node does not exist yet: the kubelet registers it asynchronously, so an
// agent that starts with the kubelet (the hollow node, a static pod, a node
// that re-registers) would otherwise exit before its node is there. Any
// other error ends the wait.
func (p *Publisher) PublishWhenRegistered(ctx context.Context) error {
	logged := false
	return wait.PollUntilContextCancel(ctx, registrationPoll, true, func(ctx context.Context) (bool, error) {
		inv := p.tracker.Inventory()
		err := Publish(ctx, p.client, p.node, inv)
		if apierrors.IsNotFound(err) {
			if !logged {
				klog.FromContext(ctx).Info("Waiting for the Node to be registered", "node", p.node)
				logged = true
			}
			return false, nil
		}
		if err == nil {
			p.done(inv)
		}
		return err == nil, err
	})
}

// Trigger asks for a republish without blocking.
func (p *Publisher) Trigger() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run republishes after every Trigger until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			inv := p.tracker.Inventory()
			err := apiretry.Do(ctx, publishAttempts, func() error {
				return Publish(ctx, p.client, p.node, inv)
			})
			if err != nil {
				klog.FromContext(ctx).Error(err, "Publishing the inventory")
			} else {
				p.done(inv)
			}
		}
	}
}

func (p *Publisher) done(inv *protocol.Inventory) {
	if p.published != nil {
		p.published(inv)
	}
}
