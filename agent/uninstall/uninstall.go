// Package uninstall removes what the agent wrote on its node, for
// `qgpu-agent uninstall` (manifests/uninstall, docs/install.md#uninstall):
// on the host its device-plugin sockets, its CDI spec files, HAMi-core's
// per-container region directories and its grant store; on the Node object
// its inventory annotation and the xgn taint. Nothing else is touched:
// files of other names in those directories stay, and so do the node's
// labels, which the operator set.
//
// It refuses while pods that hold qGPU slices still run on the node
// (unless Force): their containers' limits live in those files, and a
// restarted container would find them gone.
package uninstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Config says where the agent wrote. Empty paths are skipped.
type Config struct {
	Node   string
	Client kubernetes.Interface
	// DBFile is the agent's grant store (--dbfile).
	DBFile string
	// DevicePluginDir holds the agent's plugin sockets (--device-plugin-dir).
	DevicePluginDir string
	// CDISpecDir holds the agent's per-container CDI specs (--cdi-spec-dir).
	CDISpecDir string
	// HAMiRegionRoot holds HAMi-core's per-container regions (--hami-region-root).
	HAMiRegionRoot string
	// Force removes everything even while qGPU pods run on the node.
	Force bool
}

// ErrPodsRemain is the refusal while qGPU pods still run on the node.
var ErrPodsRemain = errors.New("qGPU pods still run on the node")

// Run removes what the agent wrote and returns one line per thing removed.
// It is idempotent: a second run removes nothing and succeeds.
func Run(ctx context.Context, cfg Config) ([]string, error) {
	if cfg.Node == "" || cfg.Client == nil {
		return nil, errors.New("uninstall: the node name and an API client are required")
	}
	if !cfg.Force {
		if err := checkDrained(ctx, cfg.Client, cfg.Node); err != nil {
			return nil, err
		}
	}
	done, hostErr := cleanHost(cfg)
	changes, nodeErr := cleanNode(ctx, cfg.Client, cfg.Node)
	return append(done, changes...), errors.Join(hostErr, nodeErr)
}

// checkDrained refuses while pods on the node that are not terminal hold
// or ask for qGPU slices.
func checkDrained(ctx context.Context, client kubernetes.Interface, node string) error {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var left []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		_, assigned := p.Annotations[protocol.AnnotationAssignment]
		if assigned || request.Asks(&p) {
			left = append(left, p.Namespace+"/"+p.Name)
		}
	}
	if len(left) == 0 {
		return nil
	}
	sort.Strings(left)
	if len(left) > 8 {
		left = append(left[:8:8], fmt.Sprintf("and %d more", len(left)-8))
	}
	return fmt.Errorf("%w: %s on node %s; drain it first (kubectl drain %s --pod-selector=… or delete them), or pass --force",
		ErrPodsRemain, strings.Join(left, ", "), node, node)
}

// cleanHost removes the agent's files; a path that is already gone is fine.
func cleanHost(cfg Config) ([]string, error) {
	var paths []string
	if cfg.DevicePluginDir != "" {
		for _, names := range []map[string]string{deviceplugin.SocketNames, deviceplugin.VocabularySocketNames} {
			for _, name := range names {
				paths = append(paths, filepath.Join(cfg.DevicePluginDir, name))
			}
		}
	}
	if cfg.DBFile != "" {
		paths = append(paths, cfg.DBFile)
	}
	var errs []error
	for _, dir := range []struct {
		path string
		ours func(os.DirEntry) bool
	}{
		{cfg.CDISpecDir, func(e os.DirEntry) bool { _, ok := enforce.ParseSpecFileName(e.Name()); return ok && !e.IsDir() }},
		{cfg.HAMiRegionRoot, func(e os.DirEntry) bool { _, _, ok := hamiregion.ParseContainerDir(e.Name()); return ok && e.IsDir() }},
	} {
		found, err := entries(dir.path, dir.ours)
		errs = append(errs, err)
		paths = append(paths, found...)
	}
	slices.Sort(paths)
	var removed []string
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "removed "+p)
	}
	return removed, errors.Join(errs...)
}

// entries are the paths of dir's entries that ours accepts; a missing or
// unset dir has none.
func entries(dir string, ours func(os.DirEntry) bool) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	list, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var out []string
	for _, e := range list {
		if ours(e) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// cleanNode removes the inventory annotation and the xgn taint from the
// node, guarded by its resourceVersion and retried on conflicts. The agent
// may list nodes but not get one (manifests/agent/rbac.yaml).
func cleanNode(ctx context.Context, client kubernetes.Interface, name string) ([]string, error) {
	var changes []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changes = nil
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list.Items, func(n v1.Node) bool { return n.Name == name })
		if i < 0 {
			return fmt.Errorf("node %s not found", name)
		}
		node := &list.Items[i]
		meta := map[string]any{"resourceVersion": node.ResourceVersion}
		patch := map[string]any{"metadata": meta}
		if _, ok := node.Annotations[protocol.AnnotationInventory]; ok {
			meta["annotations"] = map[string]any{protocol.AnnotationInventory: nil}
			changes = append(changes, fmt.Sprintf("node %s: removed annotation %s", name, protocol.AnnotationInventory))
		}
		kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t v1.Taint) bool { return t.Key == xgn.TaintKey })
		if len(kept) != len(node.Spec.Taints) {
			patch["spec"] = map[string]any{"taints": kept}
			changes = append(changes, fmt.Sprintf("node %s: removed taint %s", name, xgn.TaintKey))
		}
		if len(changes) == 0 {
			return nil
		}
		raw, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{FieldManager: "qgpu-agent"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cleaning node %s: %w", name, err)
	}
	return changes, nil
}
