package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The kustomizations the e2e program writes over the shipped manifests
// (images and what the fake nodes need changed, nothing else) and how it
// applies them.

func systemOverrides(o options) string {
	return imageOverrides(o) + fmt.Sprintf(`patches:
%[1]s# The mixed node (e2e-node-2) has the spec NVIDIA's device plugin writes,
# and its agent writes none: a node set up by GPU Operator's components
# alone. The DRA leg's node has an agent of its own (draAgentOverrides):
# qgpu-agent stays off it as off every mixed node, qgpu-agent-colocation by
# affinity.
- target: {kind: DaemonSet, name: qgpu-agent-colocation}
  patch: |-
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--cdi-card-kind="}
    - op: add
      path: /spec/template/spec/affinity
      value: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: %[3]s, operator: NotIn, values: [enable]}]}]}}}
- target: {kind: DaemonSet, name: qgpu-mps-control-daemon}
  patch: |-
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--fake-cards=%[2]s"}
`, agentPatch(o, o.fakeCards), o.fakeCards, draNodeLabel)
}

func imageOverrides(o options) string {
	return fmt.Sprintf(`images:
- name: ghcr.io/qgpu-scheduler/qgpu-scheduler
  newName: %[1]s/qgpu-scheduler
  newTag: %[2]q
- name: ghcr.io/qgpu-scheduler/qgpu-agent
  newName: %[1]s/qgpu-agent
  newTag: %[2]q
`, o.repo, o.version)
}

// agentPatch is the patch of the agents' DaemonSets: the node has no GPU,
// the agents run on fake cards and see the fake driver root the e2e
// program made (device nodes, libraries) at FakeDriverRoot, the same path
// as the node's.
func agentPatch(o options, cards string) string {
	return fmt.Sprintf(`- target: {kind: DaemonSet, labelSelector: "app in (qgpu-agent,qgpu-agent-colocation)"}
  patch: |-
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--fake-cards=%[1]s"}
%[2]s    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--driver-root=%[3]s"}
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--driver-root-ctr-path=%[3]s"}
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--cdi-hook-path=%[4]s"}
    - {op: add, path: /spec/template/spec/volumes/-, value: {name: qgpu-e2e-driver, hostPath: {path: %[3]s, type: Directory}}}
    - {op: add, path: /spec/template/spec/containers/0/volumeMounts/-, value: {name: qgpu-e2e-driver, mountPath: %[3]s, readOnly: true}}
`, cards, deviceRootArg(o), FakeDriverRoot, ToolkitDir+"/nvidia-cdi-hook")
}

func deviceRootArg(o options) string {
	var out string
	if o.deviceRoot {
		out = fmt.Sprintf("    - {op: add, path: /spec/template/spec/containers/0/args/-, value: \"--device-root=%s\"}\n", DeviceRoot)
	}
	if o.deviceListStrategy != "" {
		out += fmt.Sprintf("    - {op: add, path: /spec/template/spec/containers/0/args/-, value: \"--device-list-strategy=%s\"}\n", o.deviceListStrategy)
	}
	return out
}

func examplesOverrides(o options) string {
	return fmt.Sprintf(`images:
- name: registry.k8s.io/pause
  newName: %s/probe
  newTag: %q
`, o.repo, o.version)
}

// writeKustomization writes <work>/kustomize/<name>/kustomization.yaml with
// base as its only resource, the components (paths in the repository) and
// the overrides.
func writeKustomization(o options, root, name, base, overrides string, components ...string) (string, error) {
	dir := filepath.Join(o.workDir, "kustomize", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, filepath.Join(root, base))
	if err != nil {
		return "", err
	}
	content := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\n", rel)
	if len(components) > 0 {
		content += "components:\n"
		for _, c := range components {
			relc, err := filepath.Rel(dir, filepath.Join(root, c))
			if err != nil {
				return "", err
			}
			content += "- " + relc + "\n"
		}
	}
	content += overrides
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(content), 0o644)
}

// apply server-side-applies the kustomization in dir; an admission policy
// may refuse the objects refusable accepts (nil: none), and their
// refusals are returned by "namespace/name".
func apply(ctx context.Context, cp *harness.ControlPlane, dir string, refusable func(*unstructured.Unstructured) bool) (map[string]string, error) {
	objs, err := harness.ReadManifests(dir)
	if err != nil {
		return nil, err
	}
	// The apiserver may still be creating the namespace or the RBAC the
	// next object needs; retry a bounded number of times.
	var refused map[string]string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		if refused, err = harness.ApplyRefusable(ctx, cp.Config, objs, false, refusable); err != nil {
			fmt.Println("apply (retrying):", err)
			return false, nil
		}
		return true, nil
	})
	return refused, err
}

// examplePods are the Pods of the examples' kustomization: how many, and
// the "namespace/name" of those labelled rejected.
type examplePods struct {
	pods     int
	rejected []string
}

// applyExamples applies the examples as apply does; the admission policies
// may refuse the ones labelled rejected (their messages by name).
func applyExamples(ctx context.Context, cp *harness.ControlPlane, dir string) (examplePods, map[string]string, error) {
	var ex examplePods
	objs, err := harness.ReadManifests(dir)
	if err != nil {
		return ex, nil, err
	}
	rejected := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Pod" && o.GetLabels()[expectLabel] == "rejected"
	}
	for _, o := range objs {
		switch {
		case rejected(o):
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ex.rejected = append(ex.rejected, ns+"/"+o.GetName())
		case o.GetKind() == "Pod":
			ex.pods++
		}
	}
	refused, err := apply(ctx, cp, dir, rejected)
	return ex, refused, err
}
