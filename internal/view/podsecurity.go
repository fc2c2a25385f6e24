package view

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// LabelPodSecurityEnforce is Pod Security admission's enforce label on a
// namespace.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// PodSecurityWarnings names the namespaces that hold qGPU pods without Pod
// Security `baseline` or `restricted` enforced by their label
// (docs/install.md#tenant-namespaces): a pod there may run privileged or
// mount the node's device, CDI and agent paths, and take more than its
// slice. A namespace without the label gets the cluster's default, which the
// API does not show, so it is named too. namespaces are the cluster's; a
// namespace of a qGPU pod that is not among them is skipped.
func (c *Cluster) PodSecurityWarnings(namespaces []v1.Namespace) []Violation {
	pods := map[string]int{}
	for _, p := range c.Pods {
		if p.Phase != v1.PodSucceeded && p.Phase != v1.PodFailed {
			pods[p.Namespace]++
		}
	}
	var out []Violation
	for _, ns := range namespaces {
		n := pods[ns.Name]
		if n == 0 {
			continue
		}
		level, labelled := ns.Labels[LabelPodSecurityEnforce]
		switch {
		case level == "baseline" || level == "restricted":
			continue
		case !labelled:
			level = "not set (the cluster's default applies)"
		}
		out = append(out, Violation{"PodSecurity", ns.Name, fmt.Sprintf(
			"%d qGPU pod(s) in a namespace whose %s is %s: label it baseline (restricted where pods run on MPS nodes) so that no pod there can run privileged or mount the node's device and agent paths",
			n, LabelPodSecurityEnforce, level)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out
}
