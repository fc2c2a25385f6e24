package args

import (
	"go/build"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/qgpu-scheduler/qgpu/"

// TestImportsNoPlugin: the scheduler's configuration (config/args and its
// v1 version) sits below the plugin
// it configures, so no package it imports, directly or through other
// packages of this module, is under plugins/ (what it needs of the plugin's
// vocabulary, the names, is config/protocol's). Packages of other modules
// cannot import this one's, so the walk stays inside the module. Test files
// do not count: the profile tests build the whole scheduler.
func TestImportsNoPlugin(t *testing.T) {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	root := filepath.Join(filepath.Dir(here), "..", "..")
	ctx := build.Default
	ctx.CgoEnabled = false
	seen := map[string][]string{} // package → the chain that imports it
	queue := []string{module + "config/args", module + "config/args/v1"}
	for _, p := range queue {
		seen[p] = []string{p}
	}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		pkg, err := ctx.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, module) || seen[imp] != nil {
				continue
			}
			seen[imp] = append(append([]string(nil), seen[path]...), imp)
			if strings.HasPrefix(imp, module+"plugins/") {
				t.Errorf("%s imports %s (%s)", seen[imp][0], imp, strings.Join(seen[imp], " → "))
			}
			queue = append(queue, imp)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("walked %d packages: the walk found not even config/protocol", len(seen))
	}
}
