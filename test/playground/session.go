package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// showExamples applies the examples, waits for them and prints the cards.
func showExamples(ctx context.Context, o options, c *harness.Cluster, w io.Writer) error {
	if o.examples == "" {
		fmt.Fprintln(w, "[2/3] No examples to apply.")
		return kubectlQGPU(w, c.Kubeconfig, "nodes")
	}
	objs, err := harness.ReadManifests(o.examples)
	if err != nil {
		return err
	}
	exs := examplePods(objs)
	rejected := 0
	for _, e := range exs {
		if e.WantRejected {
			rejected++
		}
	}
	fmt.Fprintf(w, "[2/3] Applying %s: %d pods, of which %d must be refused at creation\n", o.examples, len(exs), rejected)
	fmt.Fprintf(w, "      (what `kubectl apply -k %s` does)\n", o.examples)
	refused, err := harness.ApplyRefusable(ctx, c.Config, objs, false, func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "Pod" && u.GetLabels()[LabelExpect] == ExpectRejected
	})
	if err != nil {
		return err
	}
	for _, e := range exs {
		e.Refused = refused[e.Namespace+"/"+e.Name]
	}
	fmt.Fprintf(w, "[3/3] Waiting until each pod is Running with the agent's grant, or rejected\n")
	t := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	waitErr := waitExamples(waitCtx, c.Client, exs)
	fmt.Fprintf(w, "      settled in %v\n", time.Since(t).Round(100*time.Millisecond))
	fmt.Fprintf(w, "\nWhere every pod landed, card by card (HOLDERS: namespace/pod):\n")
	if err := kubectlQGPU(w, c.Kubeconfig, "nodes"); err != nil {
		return err
	}
	fmt.Fprintln(w, "(MEMORY: GiB used/total. CORES: percent held by general pods. GREEDY: offline pods' share.")
	fmt.Fprintln(w, " PODS: pods/limit, on:off = online:offline pods; online pods hold memory only.)")
	if err := kubectlQGPU(w, c.Kubeconfig, "pods", "-A"); err != nil {
		return err
	}
	if n := printOutcome(w, exs); n > 0 && waitErr == nil {
		waitErr = fmt.Errorf("%d example(s) did not land as expected", n)
	}
	return waitErr
}

// stayUp publishes the admin kubeconfig and the ready marker, says how to
// use the playground, and waits for SIGTERM or SIGINT.
func stayUp(ctx context.Context, o options, c *harness.Cluster, w io.Writer) error {
	kubeconfig := filepath.Join(o.dir, "kubeconfig")
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(w, `
The playground is up (pid %d). From another shell:

  export KUBECONFIG=%s
  kubectl get nodes
  kubectl apply -f my-pod.yaml      # schedulerName: qgpu-scheduler, see manifests/examples/
  bin/kubectl-qgpu nodes            # cards and who holds them
  bin/kubectl-qgpu pods -A

Logs: %s/{scheduler.log,apiserver.log,nodes/<node>/node.log,nodes/<node>/agent.log}
Stop it with: make playground-down
`, os.Getpid(), abs(kubeconfig), c.Dir)
	if err := os.WriteFile(filepath.Join(o.dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
