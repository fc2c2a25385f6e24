package app

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// pageSize is how many objects one List call asks for, as kubectl's --chunk-size.
const pageSize = 500

// maxPages bounds a listing (pageSize × maxPages objects).
const maxPages = 10000

// source reads what the commands show, asking for no more rights than each
// needs: `pods -n team-a` lists pods in team-a and nothing else.
type source struct {
	client kubernetes.Interface
	// warn reports what could not be read but is not needed (stderr).
	warn func(format string, args ...any)
}

// pods lists the pods of namespace ("" for every namespace) that selector
// matches.
func (s *source) pods(ctx context.Context, namespace, selector string) ([]v1.Pod, error) {
	var out []v1.Pod
	opts := metav1.ListOptions{LabelSelector: selector, Limit: pageSize}
	for range maxPages {
		list, err := s.client.CoreV1().Pods(namespace).List(ctx, opts)
		if err != nil {
			where := "in namespace " + namespace
			if namespace == "" {
				where = "in all namespaces"
			}
			return nil, explain(err, "listing pods "+where)
		}
		out = append(out, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("listing pods: more than %d pages of %d", maxPages, pageSize)
}

// nodes lists the nodes selector matches.
func (s *source) nodes(ctx context.Context, selector string) ([]v1.Node, error) {
	var out []v1.Node
	opts := metav1.ListOptions{LabelSelector: selector, Limit: pageSize}
	for range maxPages {
		list, err := s.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, explain(err, "listing nodes")
		}
		out = append(out, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("listing nodes: more than %d pages of %d", maxPages, pageSize)
}

// claims lists every ResourceClaim, for check to compare the claimed pods
// with (docs/dra.md). Claims are extra: where the API is not served (before
// Kubernetes 1.34) or the user may not list them, check warns once and
// compares nothing.
func (s *source) claims(ctx context.Context) []resourceapi.ResourceClaim {
	var out []resourceapi.ResourceClaim
	opts := metav1.ListOptions{Limit: pageSize}
	for range maxPages {
		list, err := s.client.ResourceV1().ResourceClaims("").List(ctx, opts)
		if err != nil {
			s.warn("ResourceClaims not read (cards count only the pods' slices, and claimed pods are not compared with their claims): %v", explain(err, "listing resourceclaims"))
			return nil
		}
		out = append(out, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out
		}
	}
	s.warn("ResourceClaims not read (cards count only the pods' slices, and claimed pods are not compared with their claims): more than %d pages of %d", maxPages, pageSize)
	return nil
}

// namespaces lists the cluster's namespaces for check's Pod Security
// warnings; a user who may not list them is warned once and gets nil.
func (s *source) namespaces(ctx context.Context) []v1.Namespace {
	list, err := s.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		s.warn("namespaces not read (their Pod Security levels are not checked): %v", explain(err, "listing namespaces"))
		return nil
	}
	return list.Items
}

// cardModels reads the card models of the named nodes from their
// inventories, for `pods -o wide`. Node info is extra there: a user who may
// not get nodes is warned once and gets nil.
func (s *source) cardModels(ctx context.Context, names []string) map[string]map[int]string {
	out := map[string]map[int]string{}
	for _, name := range names {
		n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			s.warn("the MODEL column is empty: %v", explain(err, "reading node "+name))
			return nil
		}
		if err != nil {
			s.warn("no card models for node %s: %v", name, err)
			continue
		}
		inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
		if err != nil {
			continue // the pod's row says "-": its node has no valid inventory
		}
		out[name] = map[int]string{}
		for _, c := range inv.Cards {
			out[name][c.Index] = c.Model
		}
	}
	return out
}

// explain says what was being done and, when the API forbade it, which
// right is missing and what can be done with less.
func explain(err error, doing string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: forbidden for your credentials (%w); `kubectl qgpu pods -n <namespace>` needs only the right to list pods in that namespace, `nodes` and `check` need to list nodes and pods in all namespaces", doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
