// Command qgpu-hollow-node runs one hollow kubelet (kubemark's, with a fake
// CRI runtime) whose container manager holds a real kubelet device manager,
// so device plugins (the qGPU agent) register over kubelet.sock, feed node
// capacity through ListAndWatch and get Allocate calls from kubelet
// admission; with --dra also the kubelet's DRA manager, so a DRA kubelet
// plugin prepares the node's claims (dra.go). See docs/design.md#what-the-tests-run-for-real and test/harness.
//
// Signals: SIGHUP restarts the device manager (new kubelet.sock, plugins
// must register again); SIGUSR1 kills the agent (SIGKILL) and starts it
// again; SIGTERM and SIGINT stop the agent and exit.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

type options struct {
	kubeconfig   string
	nodeName     string
	nodeLabels   map[string]string
	rootDir      string
	cpu          int
	memory       resource.Quantity
	pods         int
	isolate      bool
	agentCmd     string
	agentArgs    []string
	statusPeriod time.Duration
	leaseSeconds int
	// dra runs the kubelet's DRA manager; cdiDirs are the agent's CDI spec
	// directories (dra.go).
	dra     bool
	cdiDirs []string
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags(args []string) (*options, error) {
	o := &options{memory: resource.MustParse("64Gi")}
	fs := flag.NewFlagSet("qgpu-hollow-node", flag.ContinueOnError)
	klog.InitFlags(fs)
	var labels, memory string
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the kubelet (required)")
	fs.StringVar(&o.nodeName, "node-name", "", "Node name (required)")
	fs.StringVar(&labels, "node-labels", "", "node labels, k=v,k2=v2")
	fs.StringVar(&o.rootDir, "root-dir", "", "directory for all kubelet and CRI state (required; not under /var/lib)")
	fs.IntVar(&o.cpu, "cpu", 16, "CPU capacity in cores")
	fs.StringVar(&memory, "memory", "64Gi", "memory capacity")
	fs.IntVar(&o.pods, "pods", 110, "pod capacity")
	fs.BoolVar(&o.isolate, "isolate", true, "run in a private mount namespace with a tmpfs on /var/lib (needs root)")
	fs.StringVar(&o.agentCmd, "agent-cmd", "", "command line of the node agent, split on white space; started once the device manager is up, logs to <root-dir>/agent.log")
	fs.Var((*stringList)(&o.agentArgs), "agent-arg", "extra agent argument (repeatable)")
	fs.DurationVar(&o.statusPeriod, "node-status-update-frequency", time.Second,
		"how often the kubelet checks node status; short so that device capacity shows up fast")
	fs.IntVar(&o.leaseSeconds, "node-lease-duration-seconds", 40,
		"the kubelet's node Lease duration; it renews the Lease every quarter of it (test/chaos watches the renewals as the kubelet's heartbeat)")
	fs.BoolVar(&o.dra, "dra", false, "run the kubelet's DRA manager: DRA kubelet plugins (the agent with --kubelet-api=dra) register in <root-dir>/kubelet/plugins_registry and prepare the claims of the node's pods")
	fs.Var((*stringList)(&o.cdiDirs), "cdi-spec-dir", "a directory of the agent's CDI specs: the environment the claims' CDI devices set is recorded with the device plugins' (repeatable; --dra)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.kubeconfig == "" || o.nodeName == "" || o.rootDir == "" {
		return nil, fmt.Errorf("--kubeconfig, --node-name and --root-dir are required")
	}
	var err error
	if o.memory, err = resource.ParseQuantity(memory); err != nil {
		return nil, fmt.Errorf("parsing --memory: %w", err)
	}
	if o.nodeLabels, err = parseLabels(labels); err != nil {
		return nil, err
	}
	return o, nil
}

func parseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("parsing --node-labels: %q is not k=v", kv)
		}
		labels[k] = v
	}
	return labels, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if o.isolate && os.Getenv(isolatedEnv) == "" {
		code, err := runIsolated()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(code)
	}
	if err := run(o); err != nil {
		klog.ErrorS(err, "Hollow node failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
