package main

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// renderDaemonSets renders the e2e program's kustomization name (base and
// components in the repository, the overrides) and returns its DaemonSets.
func renderDaemonSets(t *testing.T, o options, name, base, overrides string, components ...string) map[string]*appsv1.DaemonSet {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := writeKustomization(o, root, name, base, overrides, components...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := harness.ReadManifests(dir)
	if err != nil {
		t.Fatalf("rendering %s: %v", name, err)
	}
	out := map[string]*appsv1.DaemonSet{}
	for _, obj := range objs {
		if obj.GetKind() != "DaemonSet" {
			continue
		}
		ds := &appsv1.DaemonSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, ds); err != nil {
			t.Fatal(err)
		}
		out[ds.Name] = ds
	}
	return out
}

// TestDRAAgentKustomization: the DRA leg's agent is one DaemonSet of its
// own, in DRA mode on the DRA node's fake cards, selected by the node
// label; the colocation agent, kept in device-plugin mode, stays off that
// node.
func TestDRAAgentKustomization(t *testing.T) {
	o := options{repo: "ghcr.io/example", version: "v1", fakeCards: "2xT4,2xV100", deviceRoot: true, workDir: t.TempDir()}
	dra := renderDaemonSets(t, o, "dra-agent", "manifests/overlays/colocation/agent", draAgentOverrides(o),
		"manifests/overlays/nvidia-runtime-class", "manifests/overlays/dra")
	if len(dra) != 1 || dra[draAgentApp] == nil {
		t.Fatalf("DaemonSets %v, want only %s", keys(dra), draAgentApp)
	}
	ds := dra[draAgentApp]
	args := ds.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--kubelet-api=dra", "--fake-cards=" + draFakeCards} {
		if !slices.Contains(args, want) {
			t.Errorf("%s args %v: no %s", ds.Name, args, want)
		}
	}
	if got := ds.Spec.Template.Spec.NodeSelector[draNodeLabel]; got != "enable" {
		t.Errorf("%s nodeSelector %v: want %s=enable", ds.Name, ds.Spec.Template.Spec.NodeSelector, draNodeLabel)
	}
	if ds.Spec.Selector.MatchLabels["app"] != draAgentApp || ds.Spec.Template.Labels["app"] != draAgentApp {
		t.Errorf("%s selector %v, template labels %v: want app=%s", ds.Name, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels, draAgentApp)
	}

	colo := renderDaemonSets(t, o, "colocation", "manifests/overlays/colocation", systemOverrides(o), "manifests/overlays/nvidia-runtime-class")
	c := colo["qgpu-agent-colocation"]
	if c == nil {
		t.Fatalf("DaemonSets %v: no qgpu-agent-colocation", keys(colo))
	}
	if slices.Contains(c.Spec.Template.Spec.Containers[0].Args, "--kubelet-api=dra") {
		t.Errorf("qgpu-agent-colocation is in DRA mode")
	}
	aff := c.Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("qgpu-agent-colocation has no required node affinity")
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != draNodeLabel ||
		terms[0].MatchExpressions[0].Operator != "NotIn" {
		t.Errorf("qgpu-agent-colocation node affinity %+v: want %s NotIn [enable]", terms, draNodeLabel)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
