// Command e2enode is make e2e-node (docs/real-node.md): kube-apiserver and
// etcd (test/harness), kube-controller-manager, a default scheduler, and
// three nodes each with the real kubelet and containerd (runc), two serving
// qGPU through device plugins, one through DRA (dra.go), on which the
// shipped manifests/ run as containers, images overridden only; then
// manifests/examples/ with the probe image in place of pause, and every
// example container's own output is checked against its assignment.
//
// The last line it prints is
//
//	e2e-node: N containers checked, M rejections as expected, F failures
//
// after the DRA leg's line (dra.go), whose failures F counts too, and it
// exits 1 when F > 0 or the environment could not be brought up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

func newFlagSet(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// options are make e2e-node's paths and names.
type options struct {
	binDir    string // _output/bin: containerd, ctr, shim, kubelet, kube-controller-manager, qgpu-e2e-cni
	repoBin   string // bin: qgpu-scheduler (the default scheduler)
	imageDir  string // _output/images: *.tar
	repo      string // image repository prefix
	version   string // image tag
	workDir   string // state and logs; kept
	timeout   time.Duration
	fakeCards string
	// deviceRoot false leaves the agent's --device-root at its default (its
	// own /dev, where the fake cards are not): the containers then get no
	// device nodes, and the checks must fail.
	deviceRoot bool
	// deviceListStrategy, if set, overrides the manifests' agent
	// --device-list-strategy (envvar: see the overriding pods win).
	deviceListStrategy string
	// defaultRuntimeAcceptsEnvvar gives e2e-node-2, where NVIDIA's runtime
	// is containerd's default, the toolkit's own default
	// accept-nvidia-visible-devices-envvar-when-unprivileged=true: a
	// negative control (its cardless pod then sees every card).
	defaultRuntimeAcceptsEnvvar bool
	// draOnly runs the DRA leg alone: the examples, the device-plugin
	// backends and the runtime controls are skipped (a shorter run while
	// working on the leg; its line is printed, the device-plugin count is 0).
	draOnly bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		if err := runNode(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "e2e-node runner:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	fs := newFlagSet("e2enode")
	fs.StringVar(&o.binDir, "bin-dir", "_output/bin", "containerd, ctr, containerd-shim-runc-v2, kubelet, kube-controller-manager, qgpu-e2e-cni")
	fs.StringVar(&o.repoBin, "repo-bin", "bin", "make build's binaries (qgpu-scheduler)")
	fs.StringVar(&o.imageDir, "images", "_output/images", "make images' tarballs")
	fs.StringVar(&o.repo, "repo", "ghcr.io/qgpu-scheduler", "the images' repository prefix")
	fs.StringVar(&o.version, "version", "", "the images' tag (make images' VERSION)")
	fs.StringVar(&o.workDir, "work-dir", "_output/e2e-node", "state and logs of this run (emptied first)")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "bound on the whole run")
	fs.StringVar(&o.fakeCards, "fake-cards", "2xT4,2xV100", "the agent's --fake-cards on every node")
	fs.BoolVar(&o.deviceRoot, "device-root", true, "give the agent --device-root with the fake cards' nodes (false, with --device-list-strategy=envvar: see the device checks fail)")
	fs.StringVar(&o.deviceListStrategy, "device-list-strategy", "", "override the manifests' agent --device-list-strategy (envvar: see the overriding pods get what they set)")
	fs.BoolVar(&o.defaultRuntimeAcceptsEnvvar, "default-runtime-accepts-envvar", false, "let NVIDIA's runtime on e2e-node-2 (its default runtime) take NVIDIA_VISIBLE_DEVICES from unprivileged containers, the toolkit's default (a negative control: see the escape checks fail)")
	fs.BoolVar(&o.draOnly, "dra-only", false, "run the DRA leg alone, without the examples, the device-plugin backends and the runtime controls (while working on the leg; make e2e-node runs everything)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e-node: must run as root: it starts containerd and kubelets, creates device nodes with mknod, mounts in its own mount namespaces and adds veth links for pods (run: sudo make e2e-node)")
		os.Exit(1)
	}
	if o.version == "" {
		fmt.Fprintln(os.Stderr, "e2e-node: --version is required")
		os.Exit(2)
	}
	for _, p := range []*string{&o.binDir, &o.repoBin, &o.imageDir, &o.workDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e-node:", err)
			os.Exit(1)
		}
		*p = abs
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		os.Exit(1)
	}
	// The in-process apiserver and etcd log through klog: into a file, so
	// that the output is the run's progress and verdicts.
	kfs := newFlagSet("klog")
	klog.InitFlags(kfs)
	_ = kfs.Set("logtostderr", "false")
	_ = kfs.Set("alsologtostderr", "false")
	_ = kfs.Set("stderrthreshold", "FATAL")
	_ = kfs.Set("log_file", filepath.Join(o.workDir, "..", "e2e-node-apiserver.log"))
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, o)
	if err != nil {
		fmt.Println("e2e-node: error:", err)
		res.failures++
	}
	klog.Flush()
	if res.dra == nil {
		fmt.Println("e2e-node dra: the DRA leg did not run")
		res.dra = &draResult{failures: 1}
	}
	if res.dra.claims < draMinClaims || res.dra.rejections < draMinRejections {
		fmt.Printf("FAIL dra: %d claims checked, %d rejections as expected: want at least %d and %d (a check that did not run is not a pass)\n",
			res.dra.claims, res.dra.rejections, draMinClaims, draMinRejections)
		res.dra.failures++
	}
	fmt.Printf("e2e-node dra: %d claims checked, %d rejections as expected, %d failures\n", res.dra.claims, res.dra.rejections, res.dra.failures)
	res.failures += res.dra.failures
	fmt.Printf("e2e-node: %d containers checked, %d rejections as expected, %d failures\n", res.containers, res.rejections, res.failures)
	if res.failures > 0 {
		os.Exit(1)
	}
}

// result counts what the run checked; dra is the DRA leg's count, nil
// when it did not run.
type result struct {
	containers, rejections, failures int
	dra                              *draResult
}

func (r *result) add(o result) {
	r.containers += o.containers
	r.rejections += o.rejections
	r.failures += o.failures
}
