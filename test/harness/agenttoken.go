package harness

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// agentKubeconfig writes <root>/agent.kubeconfig for the agent of node: a
// token of the qgpu-agent ServiceAccount bound to a pod on that node, as the
// kubelet projects into a DaemonSet pod, so that the token names the node
// (authentication.kubernetes.io/node-name) and the agent runs under
// manifests/agent/own-node-policy.yaml. The pod, qgpu-system/qgpu-agent-<node>,
// stands in for the DaemonSet's; the hollow kubelet runs it on its fake
// runtime, and deleting it invalidates the token.
func (c *Cluster) agentKubeconfig(ctx context.Context, node, root string) (string, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "qgpu-system", Name: "qgpu-agent-" + node, Labels: map[string]string{"app": "qgpu-agent"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: "qgpu-agent",
			Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:         []corev1.Container{{Name: "qgpu-agent", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	pod, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating the agent pod of node %s: %w", node, err)
	}
	tok, err := c.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "agent.kubeconfig")
	return path, c.writeKubeconfig(path, &clientcmdapi.AuthInfo{Token: tok})
}
