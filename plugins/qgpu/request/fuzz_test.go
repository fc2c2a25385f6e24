package request

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// fuzzContainer sets the three qGPU resources from strings; "" leaves one
// out, and a string ParseQuantity refuses makes the whole input uninteresting.
func fuzzContainer(name, memQ, coreQ, greedyQ, limitMemQ string) (v1.Container, bool) {
	c := v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
	for _, r := range []struct{ name, q string }{{mem, memQ}, {core, coreQ}, {greedy, greedyQ}} {
		if r.q == "" {
			continue
		}
		q, err := resource.ParseQuantity(r.q)
		if err != nil {
			return c, false
		}
		c.Resources.Requests[v1.ResourceName(r.name)] = q
		c.Resources.Limits[v1.ResourceName(r.name)] = q
	}
	if limitMemQ != "" {
		q, err := resource.ParseQuantity(limitMemQ)
		if err != nil {
			return c, false
		}
		c.Resources.Limits[v1.ResourceName(mem)] = q
	}
	return c, true
}

func FuzzParse(f *testing.F) {
	f.Add("", false, "", "", "4", "30", "", "", "2", "", "")
	f.Add("offline", true, "", "", "4", "", "50", "", "4", "", "50")
	f.Add("online", true, "a100", "t4", "8", "", "", "", "8", "", "")
	f.Add("", false, "", "", "48", "200", "", "49", "", "", "")
	f.Add("", false, "", "", "1.5", "150", "", "", "1e19", "1e30", "")
	f.Add("Online", true, " , ", "", "-1", "0", "101", "", "0.999999999", "1Ei", "8Ei")
	f.Fuzz(func(t *testing.T, class string, hasClass bool, use, nouse,
		mem1, core1, greedy1, limitMem1, mem2, core2, greedy2 string) {
		c1, ok1 := fuzzContainer("a", mem1, core1, greedy1, limitMem1)
		c2, ok2 := fuzzContainer("b", mem2, core2, greedy2, "")
		if !ok1 || !ok2 {
			return
		}
		pod := makePod("p", "", c1, c2)
		if hasClass {
			pod.Annotations[protocol.AnnotationAppClass] = class
		}
		if use != "" {
			pod.Annotations[protocol.AnnotationUseGPUType] = use
		}
		if nouse != "" {
			pod.Annotations[protocol.AnnotationNoUseGPUType] = nouse
		}
		req, err := Parse(pod)
		if err != nil {
			if req != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %+v, %v: want nil and an error wrapping ErrInvalid", req, err)
			}
			return
		}
		if req == nil {
			if len(c1.Resources.Limits)+len(c2.Resources.Limits) != 0 {
				t.Fatalf("Parse = nil, nil for a pod with qGPU resources %v %v", c1.Resources.Limits, c2.Resources.Limits)
			}
			return
		}
		checkRequest(t, req)
		_ = req.MatchesModel(use + nouse)
	})
}

// checkRequest asserts what every accepted request promises to its users.
func checkRequest(t *testing.T, req *Request) {
	t.Helper()
	if len(req.Containers) == 0 {
		t.Fatalf("request without containers: %+v", req)
	}
	var total, totalCores int64
	for _, c := range req.Containers {
		if c.MemoryGiB < 1 || c.MemoryGiB > MaxMemoryGiB || c.Cards < 1 || c.Cards > protocol.MaxCards || c.MemoryGiB%int64(c.Cards) != 0 {
			t.Fatalf("bad container %+v", c)
		}
		total += c.MemoryGiB
		totalCores += c.Cores
		switch req.Class {
		case protocol.ClassGeneral:
			ok := c.Cores >= 1 && c.Cores < 100 && c.Cards == 1 && !c.Whole ||
				c.Whole && c.Cores == 100*int64(c.Cards)
			if !ok {
				t.Fatalf("bad general container %+v", c)
			}
		case protocol.ClassOnline:
			if c.Cores != 0 || c.Cards != 1 || c.Whole {
				t.Fatalf("bad online container %+v", c)
			}
		case protocol.ClassOffline:
			if c.Cores < 1 || c.Cores > 100 || c.Cards != 1 || c.Whole {
				t.Fatalf("bad offline container %+v", c)
			}
		default:
			t.Fatalf("bad class %q", req.Class)
		}
	}
	if req.SharesOneCard() && total > MaxMemoryGiB {
		t.Fatalf("%s pod over one card: %d GiB", req.Class, total)
	}
	if req.Class == protocol.ClassOffline && totalCores > 100 {
		t.Fatalf("offline pod greedy total %d", totalCores)
	}
}
