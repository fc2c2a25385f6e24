package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const schedulerUser = "system:serviceaccount:qgpu-system:qgpu-scheduler"

// failPolicy rejects the scheduler's requests on resource (of the core
// group, or group/version/resource) for objects whose name ends in one of
// two digits, while its binding exists.
func failPolicy(name, resource string, op admv1.OperationType, digits string) *admv1.ValidatingAdmissionPolicy {
	rule := admv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}
	if gvr := strings.Split(resource, "/"); len(gvr) > 2 {
		rule = admv1.Rule{APIGroups: gvr[:1], APIVersions: gvr[1:2], Resources: []string{strings.Join(gvr[2:], "/")}}
	}
	fail := admv1.Fail
	p := &admv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admv1.MatchResources{ResourceRules: []admv1.NamedRuleWithOperations{{
				RuleWithOperations: admv1.RuleWithOperations{Operations: []admv1.OperationType{op},
					Rule: rule},
			}}},
			MatchConditions: []admv1.MatchCondition{{Name: "scheduler", Expression: fmt.Sprintf("request.userInfo.username == %q", schedulerUser)}},
			Validations: []admv1.Validation{{
				Expression: fmt.Sprintf("!(object.metadata.name.endsWith('%c') || object.metadata.name.endsWith('%c'))", digits[0], digits[1]),
				Message:    "chaos: " + name,
			}},
		},
	}
	return p
}

// releases is true for a write of a claim's status that takes a qGPU
// allocation back.
const releases = "has(oldObject.status) && has(oldObject.status.allocation) && (!has(object.status) || !has(object.status.allocation))"

// onlyWhen narrows a failPolicy to the requests for which the CEL
// condition holds.
func onlyWhen(p *admv1.ValidatingAdmissionPolicy, cond string) *admv1.ValidatingAdmissionPolicy {
	v := &p.Spec.Validations[0]
	v.Expression = fmt.Sprintf("!(%s) || %s", cond, v.Expression)
	return p
}

// runBindFailures makes PreBind's update (names ending 3, 7), the
// binding (5, 8), and the scheduler's writes of claim status (3, 7: the
// allocation in PreBind; 5, 8: releases, after a failed binding and in
// the pod's next cycle) fail while toggled policies are bound, and
// patches labels onto fresh pods to make PreBind's read-modify-write meet
// conflicts. A release refused leaves a claim allocated for a pod that is
// not bound, for the pod's next cycle to release (docs/dra.md).
func runBindFailures(ctx context.Context, e *env) error {
	adm := e.cs.AdmissionregistrationV1()
	policies := []*admv1.ValidatingAdmissionPolicy{
		failPolicy("chaos-fail-prebind", "pods", admv1.Update, "37"),
		failPolicy("chaos-fail-bind", "pods/binding", admv1.Create, "58"),
		failPolicy("chaos-fail-claim", "resource.k8s.io/v1/resourceclaims/status", admv1.Update, "37"),
		onlyWhen(failPolicy("chaos-fail-release", "resource.k8s.io/v1/resourceclaims/status", admv1.Update, "58"), releases),
	}
	var names []string
	for _, p := range policies {
		names = append(names, p.Name)
		if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	toggles, patches := 0, 0
	wg.Go(func() { toggles = e.toggleBindings(fctx, names...) })
	wg.Go(func() { patches = e.touchPods(fctx) })
	_, err := e.churn(ctx, e.o.pods/4, 60, e.o.runTime/2, nil)
	cancel()
	wg.Wait()
	for _, name := range names {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	}
	e.logf("fault bindings toggled %d times, %d label patches racing PreBind; faults off", toggles, patches)
	time.Sleep(3 * time.Second) // pods whose binds failed are retried after backoff
	e.countInjected(ctx)
	return err
}

// countInjected prints how many scheduling attempts the fault policies
// failed (each one ran Unreserve), and how many claim releases they refused.
func (e *env) countInjected(ctx context.Context) {
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		return
	}
	count := map[string]int32{}
	for _, ev := range evs.Items {
		for _, p := range []string{"chaos-fail-prebind", "chaos-fail-bind"} {
			if strings.Contains(ev.Message, "chaos: "+p) {
				count[p] += max(ev.Count, 1)
			}
		}
	}
	// A claim's failure in PreBind is read from the scheduler's log: its
	// FailedScheduling events did not keep the message.
	claims := e.schedulerLogLines(func(l string) bool {
		return strings.Contains(l, `"Plugin failed" err="allocating the qGPU claims`) && strings.Contains(l, "chaos: chaos-fail-claim")
	})
	releases := e.schedulerLogLines(func(l string) bool { return strings.Contains(l, "chaos: chaos-fail-release") })
	e.logf("attempts failed by injection (Unreserve ran): PreBind update %d, binding %d, claim allocation %d; claim releases refused %d",
		count["chaos-fail-prebind"], count["chaos-fail-bind"], claims, releases)
}

// toggleBindings binds and unbinds each policy at random, every 0.3-1 s.
func (e *env) toggleBindings(ctx context.Context, names ...string) int {
	adm := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	on := map[string]bool{}
	n := 0
	for ctx.Err() == nil && n < 1000 {
		name := names[rand.Intn(len(names))]
		var err error
		if on[name] {
			err = adm.Delete(ctx, name, metav1.DeleteOptions{})
		} else {
			_, err = adm.Create(ctx, &admv1.ValidatingAdmissionPolicyBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       admv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admv1.ValidationAction{admv1.Deny}},
			}, metav1.CreateOptions{})
		}
		if err == nil {
			on[name] = !on[name]
			n++
		}
		time.Sleep(time.Duration(300+rand.Intn(700)) * time.Millisecond)
	}
	return n
}

// touchPods patches a label onto the newest pending pods every 20 ms.
func (e *env) touchPods(ctx context.Context) int {
	n := 0
	for ctx.Err() == nil && n < 20000 {
		name := fmt.Sprintf("p-%05d", max(0, e.createdCount()-1-rand.Intn(3)))
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"chaos-touch":"%d"}}}`, n)
		if _, err := e.cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
			n++
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// runAgentKubelet kills agents while pods are admitted (Allocate calls and
// store writes in flight), restarts a kubelet's device manager, and marks
// a card with pods unhealthy, then healthy again.
func runAgentKubelet(ctx context.Context, e *env) error {
	sick, err := e.cardUUID(ctx, "a100-0", 0)
	if err != nil {
		return err
	}
	n := e.o.pods / 4
	_, err = e.churn(ctx, n, 60, e.o.runTime/2, func(i int) {
		node := e.c.Nodes[e.rng.Intn(len(e.c.Nodes))]
		switch i {
		case n / 8, 3 * n / 8, 5 * n / 8:
			e.logf("agent of %s SIGKILLed and restarted after pod %d", node.Name, i)
			e.watch.expect(component{"agent", node.Name}, 1, restartWindow)
			_ = node.RestartAgent()
		case n / 4:
			e.logf("kubelet device manager of %s restarted after pod %d", node.Name, i)
			_ = node.RestartDeviceManager()
		case n / 2:
			e.logf("card a100-0/0 (%s) unhealthy after pod %d", sick, i)
			_ = os.WriteFile(e.health, []byte(sick+"\n"), 0o644)
		case 7 * n / 8:
			e.logf("card a100-0/0 healthy again after pod %d", i)
			_ = os.WriteFile(e.health, nil, 0o644)
		}
	})
	_ = os.WriteFile(e.health, nil, 0o644)
	if werr := e.waitHealthy(ctx, "a100-0", 0); err == nil {
		err = werr
	}
	return err
}

func (e *env) inventory(ctx context.Context, node string) (*corev1.Node, *protocol.Inventory, error) {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	return n, inv, err
}

func (e *env) cardUUID(ctx context.Context, node string, index int) (string, error) {
	_, inv, err := e.inventory(ctx, node)
	if err != nil {
		return "", err
	}
	for _, c := range inv.Cards {
		if c.Index == index {
			return c.UUID, nil
		}
	}
	return "", fmt.Errorf("node %s has no card %d", node, index)
}

func (e *env) waitHealthy(ctx context.Context, node string, index int) error {
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(200 * time.Millisecond) {
		if _, inv, err := e.inventory(ctx, node); err == nil {
			for _, c := range inv.Cards {
				if c.Index == index && c.Healthy {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("card %s/%d not healthy again within 15 s", node, index)
}

func mergePatch(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
