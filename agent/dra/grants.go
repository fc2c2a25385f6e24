package dra

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ClaimGrants are the prepared claims as the hami-core upkeep
// (agent/hamicore) reads grants: one memory grant per request, whose "pod
// UID" and "container" are the claim's UID and the request, the names of
// the request's HAMi-core region directory (the containers that share a
// claim share its slice, and so its region). Its sweep keeps the
// directories of these, and its burst-share switch counts them.
func ClaimGrants(prepared []Prepared) []store.Grant {
	var out []store.Grant
	for _, p := range prepared {
		for _, r := range p.Requests {
			out = append(out, store.Grant{Version: store.SchemaVersion, PodUID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
				Container: requestKey(r.Name), Resource: protocol.ResourceMemory, Class: r.Class, Slices: r.Slices})
		}
	}
	return out
}

// PodGrants are the prepared claims as the priority controller
// (agent/priority) reads grants, in the shape the device plugins' Allocate
// records them: per container of a pod on the node that uses a prepared
// claim's request, a memory grant in that request's class, and for
// general and offline requests a core grant (qgpu-core, qgpu-core-greedy)
// on the pod's first container using it only (its containers share the
// claim's one slice, so the pod's share is counted once). Which claim a
// pod's claim is comes from the pod: its resourceClaimName, or the name
// status.resourceClaimStatuses gives the claim made from its template.
func PodGrants(prepared []Prepared, pods []*v1.Pod) []store.Grant {
	byName := map[string]Prepared{}
	for _, p := range prepared {
		byName[p.Namespace+"/"+p.Name] = p
	}
	var out []store.Grant
	for _, pod := range pods {
		counted := map[string]bool{} // claim UID/request whose cores this pod holds already
		for _, c := range pod.Spec.Containers {
			for _, ref := range c.Resources.Claims {
				name, ok := podClaimName(pod, ref.Name)
				if !ok {
					continue
				}
				p, ok := byName[pod.Namespace+"/"+name]
				if !ok {
					continue
				}
				for _, r := range p.Requests {
					if ref.Request != "" && ref.Request != r.Name && !isSubrequestOf(r.Name, ref.Request) {
						continue
					}
					g := store.Grant{Version: store.SchemaVersion, PodUID: string(pod.UID), Namespace: pod.Namespace,
						Name: pod.Name, Container: c.Name, Resource: protocol.ResourceMemory, Class: r.Class, Slices: slices.Clone(r.Slices)}
					out = append(out, g)
					key := string(p.UID) + "/" + r.Name
					if core, ok := enforce.CoreResource(r.Class); ok && !counted[key] {
						counted[key] = true
						g.Resource, g.Slices = core, slices.Clone(r.Slices)
						out = append(out, g)
					}
				}
			}
		}
	}
	return out
}

// podClaimName is the ResourceClaim a pod's claim entry stands for.
func podClaimName(pod *v1.Pod, entry string) (string, bool) {
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name != entry {
			continue
		}
		if rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName, true
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == entry && st.ResourceClaimName != nil {
				return *st.ResourceClaimName, true
			}
		}
	}
	return "", false
}

func isSubrequestOf(name, parent string) bool {
	return len(name) > len(parent) && name[:len(parent)] == parent && name[len(parent)] == '/'
}
