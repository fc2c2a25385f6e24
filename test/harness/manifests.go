package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// FieldManager is the server-side-apply field manager of the harness.
const FieldManager = "qgpu-harness"

// ReadManifests returns the objects of YAML files and of kustomization
// directories (built with kustomize, as `kubectl apply -k` does), in order.
// Relative paths are taken from the repository root.
func ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		p, err := repoPath(p)
		if err != nil {
			return nil, err
		}
		data, err := manifestBytes(p)
		if err != nil {
			return nil, err
		}
		got, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

func repoPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, p), nil
}

func manifestBytes(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	if !st.IsDir() {
		return os.ReadFile(p)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), p)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", p, err)
	}
	return resMap.AsYaml()
}

// DecodeManifests splits a multi-document YAML stream into objects,
// skipping empty documents.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding YAML: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Apply server-side-applies objs in order, as `kubectl apply
// --server-side` does; with dryRun the API server validates and admits
// them (`--dry-run=server`) without storing anything.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	_, err := ApplyRefusable(ctx, cfg, objs, dryRun, nil)
	return err
}

// ApplyRefusable is Apply where an admission policy may refuse the objects
// for which refusable holds (nil: none): their refusals are returned by
// "namespace/name" instead of failing the apply, as `kubectl apply -k`
// reports a refused object and goes on with the others. A refusable
// object that is admitted is applied as any other: the caller judges it.
func ApplyRefusable(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool,
	refusable func(*unstructured.Unstructured) bool) (map[string]string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	refused := map[string]string{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return refused, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return refused, fmt.Errorf("encoding %s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		ns := ""
		if m.Scope.Name() == "namespace" {
			if ns = o.GetNamespace(); ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
		if msg, ok := AdmissionRefusal(err); ok && refusable != nil && refusable(o) {
			refused[ns+"/"+o.GetName()] = msg
			continue
		}
		if err != nil {
			return refused, fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return refused, nil
}

// AdmissionRefusal is the message of an admission policy's or webhook's
// refusal in err (what follows "denied request: " or "denied the request: "),
// and whether err is one.
func AdmissionRefusal(err error) (string, bool) {
	if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return "", false
	}
	msg := err.Error()
	for _, mark := range []string{"denied request: ", "denied the request: "} {
		if i := strings.Index(msg, mark); i >= 0 {
			return msg[i+len(mark):], true
		}
	}
	return "", false
}
