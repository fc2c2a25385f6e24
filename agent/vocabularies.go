package agent

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// validateVocabularies checks --vocabularies.
func validateVocabularies(names []string) []error {
	var errs []error
	for _, n := range names {
		if _, err := vocab.Parse(n); err != nil {
			errs = append(errs, fmt.Errorf("--vocabularies: %w", err))
		}
	}
	return errs
}

// vocabularies are the vocabularies whose device plugins this agent serves:
// --vocabularies and those its Node's labels enable when it starts (a label
// added later takes effect at the agent's next start). A Node that cannot
// be read within 10 s leaves the flag's alone, and says so.
func (a *agent) vocabularies(ctx context.Context) []vocab.Vocabulary {
	var flagged []vocab.Vocabulary
	for _, n := range a.cfg.Vocabularies {
		if v, err := vocab.Parse(n); err == nil { // Validate refused the others
			flagged = append(flagged, v)
		}
	}
	var labels map[string]string
	// The kubelet registers the Node as it starts; wait a little for it. A
	// list by name, not a get: the agent's RBAC lists and watches Nodes.
	var lastErr error
	sel := fields.OneTermEqualSelector("metadata.name", a.cfg.NodeName).String()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := a.cfg.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
		if lastErr = err; err != nil {
			return false, nil
		}
		for _, n := range list.Items {
			if n.Name == a.cfg.NodeName {
				labels = n.Labels
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the node's vocabulary labels; serving --vocabularies only", "node", a.cfg.NodeName, "lastError", lastErr)
	}
	vs := deviceplugin.EnabledVocabularies(flagged, labels)
	if len(vs) > 0 {
		klog.FromContext(ctx).Info("Serving vocabularies", "vocabularies", vs)
	}
	return vs
}
