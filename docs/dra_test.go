package docs

import (
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// TestDRAExampleReads: the claim dra.md shows users ("4 GiB and 30 % of a
// T4") reads as the request it says, once the resource-claim controller
// has made the template's claim for the pod.
func TestDRAExampleReads(t *testing.T) {
	md, err := os.ReadFile("dra.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(md), "## Writing a claim")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("dra.md: no yaml block under \"Writing a claim\"")
	}
	docs := strings.Split(block, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want a ResourceClaimTemplate and a Pod, got %d documents", len(docs))
	}
	var tmpl resourceapi.ResourceClaimTemplate
	var pod v1.Pod
	for i, into := range []any{&tmpl, &pod} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	pod.Namespace, pod.UID = "default", "pod-uid"
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: pod.Name + "-gpu-x", UID: "claim-uid",
			OwnerReferences: []metav1.OwnerReference{{UID: pod.UID}}},
		Spec: tmpl.Spec.Spec,
	}
	name := claim.Name
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &name}}
	req, err := request.ParseClaims(&pod, func(_, n string) (*resourceapi.ResourceClaim, error) { return claim, nil })
	if err != nil {
		t.Fatal(err)
	}
	want := request.Container{Name: "server", MemoryGiB: 4, Cores: 30, Cards: 1}
	if req.Class != protocol.ClassGeneral || len(req.Containers) != 1 || req.Containers[0] != want || !req.MatchesModel("Tesla-T4") || req.MatchesModel("Tesla-V100") {
		t.Fatalf("the example reads as %+v", req)
	}
}
