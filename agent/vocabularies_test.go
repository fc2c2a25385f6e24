package agent

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// The agent serves the vocabularies its node's labels and its flag enable,
// and a T9k pod's one Allocate call gets its card, T9k's variables and a
// grant annotation.
func TestRunServesVocabularies(t *testing.T) {
	dir := t.TempDir()
	reg := fakeKubelet(t, dir)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{vocab.Label(vocab.T9k): protocol.LabelValueEnable}}}
	cards, _ := nvml.ParseFakeSpec("2xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p", Annotations: map[string]string{}},
		Spec: v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{vocab.T9kGPUPercent: resource.MustParse("30")}}}}},
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-p", Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{{Index: 1, UUID: fakeNVML.UUID(1), MemoryGiB: 5, Cores: 30}}}}}
	v, _ := a.Encode()
	pod.Annotations[protocol.AnnotationAssignment] = v
	client := fake.NewClientset(node, pod)
	cfg := Config{
		NodeName: "n1", Client: client, NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"),
		DevicePluginDir: dir, Backend: "env", HealthInterval: time.Hour, ReconcileInterval: time.Hour,
		Vocabularies: []string{"hami"},
	}
	run := startAgent(t, cfg)
	ctx := run.ctx
	got := map[string]bool{}
	for len(got) < 7 {
		select {
		case r := <-reg.reqs:
			got[r] = true
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatalf("registered %v, want the 3 native, T9k's 3 and HAMi's nvidia.com/gpu", got)
		}
	}
	if got[vocab.VCUDACore] {
		t.Error("vcuda served without label or flag")
	}
	var ids []string
	for i := range 30 {
		ids = append(ids, fmt.Sprintf("%s-t9k-gpu-percent-%d", fakeNVML.UUID(0), i))
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, deviceplugin.VocabularySocketNames[vocab.T9kGPUPercent]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pluginapi.NewDevicePluginClient(conn).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	e := resp.ContainerResponses[0].Envs
	if e["NVIDIA_VISIBLE_DEVICES"] != fakeNVML.UUID(1) || e["T9K_GPU_PERCENT"] != "30" || e["T9K_GPU_MEMORY"] != "5120" {
		t.Errorf("envs %v", e)
	}
	poll(t, "the grant annotation", func() bool {
		p, _ := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		return p.Annotations[protocol.AnnotationGrant] == v
	})
	run.stop(t)
}

func TestValidateVocabularies(t *testing.T) {
	if errs := validateVocabularies([]string{"t9k", "HAMi"}); len(errs) != 0 {
		t.Errorf("valid names refused: %v", errs)
	}
	errs := validateVocabularies([]string{"volcano"})
	if len(errs) != 1 || errs[0].Error() != `--vocabularies: unknown vocabulary "volcano": must be one of vcuda, t9k, hami` {
		t.Errorf("errors %v", errs)
	}
}
