// Command qgpu-playground runs qGPU on one machine without a cluster or
// Docker (docs/design.md#what-the-tests-run-for-real): a real kube-apiserver and etcd, the real
// qgpu-scheduler binary, and hollow kubelets whose device managers register
// the real qgpu-agent on simulated cards. It applies manifests/examples,
// waits until every example is Running with its grant (the ones labelled
// examples.qgpu.io/expect=rejected must be refused at creation by the
// shipped admission policies), and prints where every pod landed, card by
// card.
//
//	qgpu-playground              run once, print, tear down (make playground)
//	qgpu-playground --keep       stay up until SIGTERM/SIGINT (make playground-up)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

type options struct {
	dir      string
	nodes    string
	examples string
	keep     bool
	timeout  time.Duration
	verbose  bool
	// colocation runs only the online/offline demo against a running playground.
	colocation bool
	// vocabularies are enabled on every node by label (docs/vocabularies.md).
	vocabularies string
}

func main() {
	o := options{}
	flag.StringVar(&o.dir, "dir", "_output/playground", "state, logs and the admin kubeconfig go here")
	flag.StringVar(&o.nodes, "nodes", envOr("PLAYGROUND_NODES", harness.DefaultNodes),
		`simulated nodes, "[<n>*]<name>:<cards>[:mixed],...": cards as the agent's --fake-cards with "+" between groups (default $PLAYGROUND_NODES)`)
	flag.StringVar(&o.examples, "examples", "manifests/examples", `kustomization dir or YAML file to apply ("" for none)`)
	flag.BoolVar(&o.keep, "keep", false, "stay up until SIGTERM or SIGINT, with the admin kubeconfig at <dir>/kubeconfig")
	flag.DurationVar(&o.timeout, "timeout", time.Minute, "how long the examples may take to land")
	flag.BoolVar(&o.verbose, "verbose", false, "show the control plane's progress messages")
	flag.StringVar(&o.vocabularies, "vocabularies", "", `label every node vocabulary.qgpu.io/<name>=enable for these vocabularies, e.g. "vcuda,t9k,hami" (with --examples manifests/examples/vocabularies)`)
	flag.BoolVar(&o.colocation, "colocation", false, "only show online/offline at run time on the playground running in --dir (make playground-colocation)")
	flag.Parse()
	// The harness links a test package whose init catches SIGINT: handle it here.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := run
	if o.colocation {
		runner = runColocation
	}
	if err := runner(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stdout, "\nFAILED:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, o options, w io.Writer) (err error) {
	nodes, err := harness.ParseNodes(o.nodes)
	if err != nil {
		return err
	}
	if err := labelVocabularies(nodes, o.vocabularies); err != nil {
		return err
	}
	dir, err := prepareDir(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "qGPU playground: a real kube-apiserver and etcd, the qgpu-scheduler binary, and %d hollow\n", len(nodes))
	fmt.Fprintf(w, "kubelets, each running qgpu-agent on simulated cards.\n\n")
	started := time.Now()
	c, err := startCluster(ctx, o, dir, nodes, w)
	if err != nil {
		cleanup(o, dir, false)
		return fmt.Errorf("%w\nLogs are kept in %s", err, dir)
	}
	defer func() {
		fmt.Fprint(w, "\nStopping the playground ... ")
		t := time.Now()
		stopErr := c.Stop()
		cleanup(o, dir, err == nil)
		fmt.Fprintf(w, "done in %v.\n", time.Since(t).Round(100*time.Millisecond))
		if err != nil || o.keep {
			fmt.Fprintf(w, "Logs are kept in %s (scheduler.log, apiserver.log, nodes/<node>/{node,agent}.log).\n", dir)
		}
		if err == nil {
			err = stopErr
		}
	}()
	if err := showExamples(ctx, o, c, w); err != nil {
		if !o.keep || ctx.Err() != nil {
			return err
		}
		// Up for the user's own pods even if their node set does not fit every example.
		fmt.Fprintf(w, "\nWARNING: %v\n", err)
	} else {
		fmt.Fprintf(w, "\nAll examples landed as expected in %v.\n", time.Since(started).Round(100*time.Millisecond))
		demo := &colocation{client: c.Client, kubeconfig: c.Kubeconfig, nodesDir: filepath.Join(c.Dir, "nodes"), w: w}
		t := time.Now()
		if err := demo.run(ctx); err != nil {
			return err
		}
		fmt.Fprintf(w, "(online/offline shown in %v)\n", time.Since(t).Round(100*time.Millisecond))
	}
	if !o.keep {
		return nil
	}
	return stayUp(ctx, o, c, w)
}

// prepareDir returns the directory for this run: <dir>/cluster when the
// playground stays up (its kubeconfig copied to <dir>/kubeconfig), else a
// fresh <dir>/run-* removed after a successful run.
func prepareDir(o options) (string, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return "", err
	}
	if !o.keep {
		return os.MkdirTemp(o.dir, "run-")
	}
	dir := filepath.Join(o.dir, "cluster")
	// State of a previous session is stale: its etcd is gone.
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// cleanup removes what a stopped playground leaves: the whole run dir after
// a successful run, else only etcd's data (the logs stay for reading).
func cleanup(o options, dir string, ok bool) {
	if !o.keep && ok {
		_ = os.RemoveAll(dir)
		return
	}
	_ = os.RemoveAll(filepath.Join(dir, "controlplane"))
	if o.keep {
		_ = os.Remove(filepath.Join(o.dir, "kubeconfig"))
		_ = os.Remove(filepath.Join(o.dir, "ready"))
	}
}

func startCluster(ctx context.Context, o options, dir string, nodes []harness.NodeSpec, w io.Writer) (*harness.Cluster, error) {
	if err := quietLogs(dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "[1/3] Starting %d nodes: %s\n", len(nodes), describeNodes(nodes))
	opts := harness.ClusterOptions{Nodes: nodes, RBAC: true, Admission: true, Dir: dir}
	if o.verbose {
		opts.Logf = func(f string, args ...any) { fmt.Fprintf(w, "      "+f+"\n", args...) }
	}
	t := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := harness.StartCluster(startCtx, opts)
	if err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	fmt.Fprintf(w, "      up in %v: apiserver %s (RBAC on; scheduler and agents run as the\n", time.Since(t).Round(100*time.Millisecond), c.URL)
	fmt.Fprintf(w, "      ServiceAccounts of manifests/, with exactly their rules; the admission\n")
	fmt.Fprintf(w, "      policies of manifests/admission enforced)\n")
	return c, nil
}

// quietLogs sends everything written to stderr (the in-process apiserver's
// and etcd's logs) to a file, so the terminal shows the playground's story.
func quietLogs(dir string) error {
	f, err := os.Create(filepath.Join(dir, "apiserver.log"))
	if err != nil {
		return err
	}
	return syscall.Dup2(int(f.Fd()), 2)
}
