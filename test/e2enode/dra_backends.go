package main

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
)

// The DRA leg on every backend, a shared claim and another driver's
// claim (docs/real-node.md#the-dra-leg-teste2enodedrago).

// draBackendVariants are the probe pods of a backend phase, each with a
// claim from the template "slice" (general, 4 GiB, 30 cores: three fit
// one T4, and under mps every slice on a card is the same, so the card's
// ceiling is each one's slice): plain, overriding every variable as root,
// and overriding as uid 65534, as the device-plugin leg's variants.
var draBackendVariants = []variant{{name: "plain"}, {name: "override", override: true}, {name: "nonroot", override: true, nonRoot: true}}

// setsOwnEnv: the pod's container sets variables of its own (an
// overriding variant), so its variables do not tell its backend.
func setsOwnEnv(p *corev1.Pod) bool {
	return len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Env) > 0
}

// checkBackend relabels the emptied node to backend (policy fixed-share,
// as the device-plugin leg does, so that every limit applies), runs the
// variants' claims and checks each from inside its container
// (checkClaimPod: its allocation, claim spec, card, variables and the
// backend's delivery) and the overriding ones' escape attempts; the pods
// are left running for checkSharedClaim and checkUnprepared. false when
// the node could not be switched.
func (c *draChecker) checkBackend(backend string, controls verify.Controls) bool {
	if err := labelNode(c.ctx, c.cp, c.n.name, map[string]string{protocol.LabelEnforcement: backend,
		protocol.LabelSchedulePolicy: string(protocol.PolicyFixedShare)}); err != nil {
		c.fail("labelling %s %s: %v", c.n.name, backend, err)
		return false
	}
	c.backend = backend
	c.logf("%s labelled %s, policy fixed-share", c.n.name, backend)
	if backend == "mps" {
		if err := waitMPSDaemon(c.ctx, c.cp, c.n); err != nil {
			c.fail("the MPS control daemon on %s: %v", c.n.name, err)
			return false
		}
	}
	var attempts []verify.Attempt
	for _, v := range draBackendVariants {
		name := fmt.Sprintf("dra-%s-%s", backend, v.name)
		c.res.claims++
		p, err := c.runBackendClaim(name, v)
		if err != nil {
			c.fail("%s %s: %v", backend, name, err)
			continue
		}
		card, problems := c.checkClaimPod(p, protocol.ClassGeneral, 4, 30)
		var note string
		if v.override {
			lines, err := containerOutput(c.n.dir, p, "probe")
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				a, own := escapeAttempts(backend, lines, cardCount(c.o.fakeCards))
				attempts = append(attempts, a...)
				problems = append(problems, own...)
				note = verify.EscapeSummary(lines)
			}
		}
		if len(problems) > 0 {
			c.fail("%s %s: %s", backend, name, strings.Join(problems, "; "))
			continue
		}
		c.ok("%s %s (general, 4 GiB, 30 cores) on card %d: allocated, prepared by the %s backend, its card, files, directories and variables in the container, none of the pod's own overrides%s%s",
			backend, name, card, backend, note, draBackendNote(backend))
	}
	c.res.failures += escapeLineTo(c.out, c.n.name, backend+" (dra)", verify.Tally(attempts, controls), minEscapeAttempts)
	return true
}

func draBackendNote(backend string) string {
	switch backend {
	case "hami-core":
		return "; its HAMi-core region is its claim's"
	case "mps":
		return "; the MPS ceiling in force on its card is its slice"
	}
	return ""
}

// runBackendClaim creates the variant's pod, with a claim from the
// template "slice", and waits until it runs. The agent sees the node's new
// label through its informer, and the mps backend needs the control
// daemon the label brings: a plain pod whose claim was prepared before
// either (by the previous backend) is deleted and made again, with a new
// claim, a bounded number of times. The overriding variants run only after
// a plain one got the backend, so they are never retried.
func (c *draChecker) runBackendClaim(name string, v variant) (*corev1.Pod, error) {
	var last error
	for attempt := 1; attempt <= 6; attempt++ {
		p := c.claimPod(name, protocol.SchedulerName, false, podClaim{name: "gpu", template: "slice"})
		if v.override {
			p.Spec.Containers[0].Env = overrides()
		}
		if v.nonRoot {
			uid := int64(65534)
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
		}
		if !c.create(p) {
			return nil, fmt.Errorf("not created")
		}
		p, err := c.waitRunning(name)
		if err == nil {
			var lines []verify.Line
			if lines, err = containerOutput(c.n.dir, p, "probe"); err == nil {
				if got := verify.Backend(lines); got == c.backend || v.override {
					return p, nil
				}
				err = fmt.Errorf("answered by the %s backend", verify.Backend(lines))
			}
		}
		if v.override {
			return p, err
		}
		last = fmt.Errorf("attempt %d: %w", attempt, err)
		c.logf("%s: retrying: %v", name, last)
		if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
			return nil, err
		}
	}
	return nil, last
}

// draDeliveryProblems is what the node's backend must have delivered to a
// claim's container beside its card and QGPU_* variables: the device-plugin
// leg's verdict for the backend (deliveryProblems), and what is the
// claim's rather than the container's: hami-core's region directory is
// <claim UID>_<request> (the containers that share a claim share it), and
// under mps the ceiling in force on the card is the slice.
func (c *draChecker) draDeliveryProblems(p *corev1.Pod, claim *resourceapi.ResourceClaim, lines []verify.Line, cores int64) []string {
	problems := deliveryProblems(c.backend, p, lines, cores)
	switch c.backend {
	case "hami-core":
		region := "/" + string(claim.UID) + "_gpu"
		i := slices.IndexFunc(lines, func(l verify.Line) bool { return l.Kind == "mount" && l.Target == "/tmp/vgpu" })
		if i < 0 || !strings.HasSuffix(lines[i].Root, region) {
			root := "none"
			if i >= 0 {
				root = lines[i].Root
			}
			problems = append(problems, fmt.Sprintf("/tmp/vgpu is %s, want the claim's region directory ...%s", root, region))
		}
	case "mps":
		problems = append(problems, mpsCeilingProblems(p, c.n)...)
	}
	return problems
}
