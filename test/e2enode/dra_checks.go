package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// draLabel marks the DRA leg's pods (default namespace, like the others').
const draLabel = "qgpu-e2e-dra"

// draChecker runs the DRA leg's checks on its node n and counts them.
type draChecker struct {
	ctx   context.Context
	start time.Time
	o     options
	cp    *harness.ControlPlane
	n     *node
	out   io.Writer
	res   draResult
	// prepared are the claims the agent prepared, by pod name.
	prepared map[string]types.UID
	// backend is the node's enforcement backend now (env until the
	// backend phases relabel it): checkClaimPod checks its delivery.
	backend string
}

func (c *draChecker) logf(format string, args ...any) {
	fmt.Fprintf(c.out, "[%6.1fs] dra: %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

func (c *draChecker) ok(format string, args ...any) {
	fmt.Fprintf(c.out, "ok   dra: "+format+"\n", args...)
}

func (c *draChecker) fail(format string, args ...any) {
	c.res.failures++
	fmt.Fprintf(c.out, "FAIL dra: "+format+"\n", args...)
}

// run is the leg, in order: the node's devices; three general claims on
// one card; an online and an offline claim on a card of their own, which a
// general claim does not join; claims that must stay unallocated; the
// agent restarted under running claims; the pods deleted and their claims
// unprepared; then each backend in turn, a shared claim, and another
// driver's claim (dra_backends.go).
func (c *draChecker) run() {
	c.prepared = map[string]types.UID{}
	c.backend = "env"
	c.logf("checks on %s begin", c.n.name)
	if !c.checkSlice() {
		return
	}
	if err := c.createTemplates(); err != nil {
		c.fail("ResourceClaimTemplates: %v", err)
		return
	}
	// The claims that must stay unallocated are made first: they wait
	// beside everything else.
	tooBig := c.createPod("dra-too-big", "too-big", true, protocol.SchedulerName)
	byDefault := c.createPod("dra-default-scheduler", "slice", true, corev1.DefaultSchedulerName)
	shareCard := c.checkRunning(protocol.ClassGeneral, 4, 30, "dra-share-1", "dra-share-2", "dra-share-3")
	mixedCard := c.checkRunning(protocol.ClassOnline, 2, 0, "dra-online")
	if offline := c.checkRunning(protocol.ClassOffline, 2, 50, "dra-offline"); offline != mixedCard || mixedCard < 0 || mixedCard == shareCard {
		c.fail("the online claim is on card %d, the offline claim on card %d, the general claims on card %d: want online and offline on one card, apart from the general ones", mixedCard, offline, shareCard)
	} else {
		c.ok("online and offline claims share card %d; the three general claims hold card %d", mixedCard, shareCard)
	}
	// Card mixedCard has 10 GiB free, the general card 2: a general claim
	// of 4 GiB fits only by joining the online/offline card.
	if c.createPod("dra-general-join", "slice", true, protocol.SchedulerName) {
		c.checkUnallocated("dra-general-join", "a general claim the online/offline card does not take", placement.ReasonCardsFull)
	}
	if tooBig {
		c.checkUnallocated("dra-too-big", "a claim of 15 GiB on 14 GiB cards", placement.ReasonCardsFull)
	}
	if byDefault {
		c.checkUnallocated("dra-default-scheduler", "a qGPU claim of a default-scheduler pod", "devices of driver gpu.qgpu.io are allocated by qgpu-scheduler only")
	}
	if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel+",qgpu.io/dra-pending=true"); err != nil {
		c.fail("deleting the pending pods: %v", err)
	}
	c.restartAgent("dra-online", "dra-offline")
	c.checkRunning(protocol.ClassGeneral, 1, 10, "dra-after-restart")
	c.checkUnprepared()
	// Each backend in turn on the emptied node (dra_backends.go), a
	// claim shared by two pods under hami-core, and a claim of another
	// driver beside a qGPU claim.
	controls, cres := escapeControls(c.ctx, c.o, c.cp, c.n, c.out)
	c.res.failures += cres.failures
	for _, backend := range []string{"env", "hami-core", "mps"} {
		if !c.checkBackend(backend, controls) {
			continue
		}
		if backend == "hami-core" {
			c.checkSharedClaim()
		}
		c.checkUnprepared()
	}
	// Off mps again: the MPS control daemon leaves the node (the
	// device-plugin leg waits for that DaemonSet's pods).
	if err := labelNode(c.ctx, c.cp, c.n.name, map[string]string{protocol.LabelEnforcement: "env"}); err != nil {
		c.fail("labelling %s env: %v", c.n.name, err)
	}
	c.checkOtherDriver()
	c.logf("checks on %s done", c.n.name)
}

// createTemplates creates the leg's ResourceClaimTemplates, as users write
// them (docs/dra.md#writing-a-claim).
func (c *draChecker) createTemplates() error {
	for name, t := range map[string]struct {
		class       protocol.Class
		memory, cor string
	}{
		"slice":   {protocol.ClassGeneral, "4Gi", "30"},
		"small":   {protocol.ClassGeneral, "1Gi", "10"},
		"too-big": {protocol.ClassGeneral, "15Gi", "30"},
		"online":  {protocol.ClassOnline, "2Gi", ""},
		"offline": {protocol.ClassOffline, "2Gi", "50"},
	} {
		tmpl := claimTemplate(name, t.class, t.memory, t.cor)
		if _, err := c.cp.Client.ResourceV1().ResourceClaimTemplates(examplesNamespace).Create(c.ctx, tmpl, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// templateOf is the template a leg pod's claim is made from.
func templateOf(class protocol.Class, memoryGiB int64) string {
	switch {
	case class != protocol.ClassGeneral:
		return string(class)
	case memoryGiB == 1:
		return "small"
	}
	return "slice"
}

// checkRunning creates the pods (claims of class, memoryGiB and cores from
// their template), waits until they run and checks each; it returns the
// card they share, -1 when they do not.
func (c *draChecker) checkRunning(class protocol.Class, memoryGiB, cores int64, names ...string) int {
	for _, name := range names {
		if !c.createPod(name, templateOf(class, memoryGiB), false, protocol.SchedulerName) {
			return -1
		}
	}
	card := -2
	for _, name := range names {
		c.res.claims++
		p, err := c.waitRunning(name)
		if err != nil {
			c.fail("%s: %v", name, err)
			return -1
		}
		got, problems := c.checkClaimPod(p, class, memoryGiB, cores)
		if len(problems) > 0 {
			c.fail("%s: %s", name, strings.Join(problems, "; "))
			return -1
		}
		c.ok("%s (%s, %d GiB, %d cores) on card %d of %s: allocated by qgpu-scheduler, prepared by the agent, its card and the claim spec's edits in the container",
			name, class, memoryGiB, cores, got, p.Spec.NodeName)
		if card != -2 && card != got {
			c.fail("%s on card %d, the others on card %d: want one card", name, got, card)
			return -1
		}
		card = got
	}
	return card
}

// createPod creates a probe pod with one claim from template, scheduled
// by scheduler; pending marks the pods that must stay unallocated.
func (c *draChecker) createPod(name, template string, pending bool, scheduler string) bool {
	return c.create(c.claimPod(name, scheduler, pending, podClaim{name: "gpu", template: template}))
}

// podClaim is one of a leg pod's claims: made from template, or the
// ResourceClaim named claim.
type podClaim struct {
	name, template, claim string
}

// claimPod is a probe pod of the leg whose container uses every claim of
// claims, scheduled by scheduler; pending marks the pods that must stay
// unallocated.
func (c *draChecker) claimPod(name, scheduler string, pending bool, claims ...podClaim) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: examplesNamespace,
			Labels:      map[string]string{"app.kubernetes.io/part-of": draLabel, "qgpu.io/dra-pending": fmt.Sprint(pending)},
			Annotations: map[string]string{"nvidia.com/use-gputype": "t4"}},
		Spec: corev1.PodSpec{
			SchedulerName:                 scheduler,
			Containers:                    []corev1.Container{{Name: "probe", Image: c.o.repo + "/probe:" + c.o.version, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: &grace,
		},
	}
	for _, pc := range claims {
		ref := corev1.PodResourceClaim{Name: pc.name}
		if pc.claim != "" {
			ref.ResourceClaimName = &pc.claim
		} else {
			ref.ResourceClaimTemplateName = &pc.template
		}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, ref)
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: pc.name})
	}
	return p
}

// create creates p. A default-scheduler pod that must stay unallocated
// may be refused at creation by qGPU's require-scheduler policy instead:
// a rejection as expected when the refusal names spec.schedulerName.
func (c *draChecker) create(p *corev1.Pod) bool {
	if _, err := c.cp.Client.CoreV1().Pods(examplesNamespace).Create(c.ctx, p, metav1.CreateOptions{}); err != nil {
		if p.Labels["qgpu.io/dra-pending"] == "true" && p.Spec.SchedulerName == corev1.DefaultSchedulerName && strings.Contains(err.Error(), "spec.schedulerName") {
			c.res.rejections++
			c.ok("%s refused at creation: %v", p.Name, err)
			return false
		}
		c.fail("creating %s: %v", p.Name, err)
		return false
	}
	return true
}

func (c *draChecker) waitRunning(name string) (*corev1.Pod, error) {
	p, err := waitPodSettled(c.ctx, c.cp, name)
	if err != nil && p != nil {
		return p, fmt.Errorf("%w: phase %s node %q %s; events: %s", err, p.Status.Phase, p.Spec.NodeName, containerStates(p), c.events(name))
	}
	return p, err
}

// claimOf is the ResourceClaim of the pod's claim "gpu".
func (c *draChecker) claimOf(p *corev1.Pod) (*resourceapi.ResourceClaim, error) {
	return c.podClaim(p, "gpu")
}

// podClaim is the ResourceClaim of the pod's claim name: the one it names,
// or the one the resource-claim controller made from its template.
func (c *draChecker) podClaim(p *corev1.Pod, name string) (*resourceapi.ResourceClaim, error) {
	for _, pc := range p.Spec.ResourceClaims {
		if pc.Name == name && pc.ResourceClaimName != nil {
			return c.cp.Client.ResourceV1().ResourceClaims(p.Namespace).Get(c.ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == name && s.ResourceClaimName != nil {
			return c.cp.Client.ResourceV1().ResourceClaims(p.Namespace).Get(c.ctx, *s.ResourceClaimName, metav1.GetOptions{})
		}
	}
	return nil, fmt.Errorf("pod %s: no claim %s made from its template (status.resourceClaimStatuses %v): is the resource-claim controller running?", p.Name, name, p.Status.ResourceClaimStatuses)
}

// events are the messages of the pod's events, oldest first.
func (c *draChecker) events(pod string) string {
	list, err := c.cp.Client.CoreV1().Events(examplesNamespace).List(c.ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range list.Items {
		msgs = append(msgs, e.Reason+": "+e.Message)
	}
	return strings.Join(msgs, " | ")
}

// checkUnallocated waits (bounded) for the pod's FailedScheduling event
// whose message holds want (the policy or reason that refuses it), and
// checks that the pod is still Pending, unbound, and every claim of it
// exists and is unallocated.
func (c *draChecker) checkUnallocated(name, what, want string) {
	if want == "" {
		c.fail("%s (%s): no expected reason given: any refusal would pass", name, what)
		return
	}
	var failed string
	err := wait.PollUntilContextTimeout(c.ctx, 2*time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.cp.Client.CoreV1().Events(examplesNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=FailedScheduling"})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			// Waiting for the resource-claim controller is not a verdict.
			if strings.Contains(e.Message, want) && !strings.Contains(e.Message, "is not created yet") {
				failed = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	p, getErr := c.cp.Client.CoreV1().Pods(examplesNamespace).Get(c.ctx, name, metav1.GetOptions{})
	switch {
	case getErr != nil:
		c.fail("%s (%s): %v", name, what, getErr)
		return
	case err != nil:
		c.fail("%s (%s): no FailedScheduling event with %q within 90s (phase %s, node %q; events: %s)", name, what, want, p.Status.Phase, p.Spec.NodeName, c.events(name))
		return
	case p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "":
		c.fail("%s (%s): phase %s on node %q, want Pending and unbound", name, what, p.Status.Phase, p.Spec.NodeName)
		return
	}
	for _, pc := range p.Spec.ResourceClaims {
		claim, err := c.podClaim(p, pc.Name)
		switch {
		case err != nil:
			c.fail("%s (%s): claim %s: %v", name, what, pc.Name, err)
			return
		case claim.Status.Allocation != nil:
			c.fail("%s (%s): its claim %s is allocated: %v", name, what, claim.Name, claim.Status.Allocation.Devices.Results)
			return
		}
	}
	c.res.rejections++
	c.ok("%s (%s) stays Pending, its claim unallocated: FailedScheduling %q", name, what, failed)
}
