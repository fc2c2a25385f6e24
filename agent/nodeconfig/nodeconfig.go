// Package nodeconfig reads the agent's per-node settings from its Node's
// labels: the isolation policy (protocol.LabelSchedulePolicy) and the
// enforcement backend (protocol.LabelEnforcement). A bad value is reported as a
// Warning Event on the Node and replaced by the default; the agent never crashes on it.
package nodeconfig

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Event reasons on the Node.
const (
	ReasonBadPolicy  = "QGPUInvalidPolicy"
	ReasonBadBackend = "QGPUInvalidBackend"
)

// Config resolves the node's policy and backend.
type Config struct {
	Node           string
	DefaultBackend string
	Options        enforce.Options
	Recorder       record.EventRecorder

	lister listersv1.NodeLister

	mu       sync.Mutex
	backends map[string]enforce.Backend
	warned   map[string]string // label → value already warned about
}

// Watch starts an informer on the agent's own Node; until it has synced (or
// without Watch) Current uses the defaults.
func (c *Config) Watch(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Node).String()
		}))
	inf := factory.Core().V1().Nodes()
	c.lister = inf.Lister()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return fmt.Errorf("node informer of %s did not sync", c.Node)
	}
	return nil
}

// Current returns the backend and policy the node's labels ask for.
func (c *Config) Current() (enforce.Backend, protocol.Policy, error) {
	var node *v1.Node
	if c.lister != nil {
		node, _ = c.lister.Get(c.Node)
	}
	return c.Resolve(node)
}

// Resolve returns the backend and policy for node (nil: the defaults).
func (c *Config) Resolve(node *v1.Node) (enforce.Backend, protocol.Policy, error) {
	var labels map[string]string
	if node != nil {
		labels = node.Labels
	}
	policy, err := protocol.ParsePolicy(labels[protocol.LabelSchedulePolicy])
	if err != nil {
		c.warnOnce(node, protocol.LabelSchedulePolicy, ReasonBadPolicy,
			fmt.Sprintf("%v; using %s", err, protocol.DefaultPolicy))
	}
	name := c.DefaultBackend
	if v, ok := labels[protocol.LabelEnforcement]; ok {
		if !known(v) {
			c.warnOnce(node, protocol.LabelEnforcement, ReasonBadBackend,
				fmt.Sprintf("label %s: unsupported value %q (have %v); using %s", protocol.LabelEnforcement, v, enforce.Names, name))
		} else {
			name = v
		}
	}
	b, err := c.backend(name)
	return b, policy, err
}

func known(name string) bool {
	for _, n := range enforce.Names {
		if n == name {
			return true
		}
	}
	return false
}

// backend builds a backend once; a failed build (hami-core without its
// library) is retried on every call, so installing the library fixes the node.
func (c *Config) backend(name string) (enforce.Backend, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.backends[name]; ok {
		return b, nil
	}
	b, err := enforce.New(name, c.Options)
	if err != nil {
		return nil, err
	}
	if c.backends == nil {
		c.backends = map[string]enforce.Backend{}
	}
	c.backends[name] = b
	return b, nil
}

func (c *Config) warnOnce(node *v1.Node, label, reason, msg string) {
	value := ""
	if node != nil {
		value = node.Labels[label]
	}
	c.mu.Lock()
	if c.warned == nil {
		c.warned = map[string]string{}
	}
	last, seen := c.warned[label]
	c.warned[label] = value
	c.mu.Unlock()
	if seen && last == value {
		return
	}
	if c.Recorder != nil && node != nil {
		c.Recorder.Event(node, v1.EventTypeWarning, reason, msg)
	}
}
