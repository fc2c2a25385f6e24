// Package pods watches the pods bound to this node (an informer with a
// spec.nodeName field selector), the only pods the agent ever looks at.
package pods

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Source lists the node's pods from an informer cache or from the API server.
type Source struct {
	client  kubernetes.Interface
	node    string
	factory informers.SharedInformerFactory
	lister  listersv1.PodLister
	synced  cache.InformerSynced
}

// New returns a source for the pods bound to node; call Start.
func New(client kubernetes.Interface, node string) *Source {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Core().V1().Pods()
	return &Source{client: client, node: node, factory: factory, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Informer returns the pod informer, for handlers that react to pod changes.
func (s *Source) Informer() cache.SharedIndexInformer {
	return s.factory.Core().V1().Pods().Informer()
}

// Start runs the informer until ctx ends and waits for its first sync.
func (s *Source) Start(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return fmt.Errorf("pod informer of node %s did not sync", s.node)
	}
	return nil
}

// Cached implements allocate.PodSource.
func (s *Source) Cached() ([]*v1.Pod, error) {
	return s.lister.List(labels.Everything())
}

// Fresh implements allocate.PodSource: a list with resourceVersion "" is a
// consistent read from etcd, never older than what the kubelet has seen.
func (s *Source) Fresh(ctx context.Context) ([]*v1.Pod, error) {
	list, err := s.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", s.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", s.node, err)
	}
	out := make([]*v1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == s.node {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}
