// Package docs holds the project's documentation; its test checks the
// names the pages use against the code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// apiName matches the annotation, label and resource names of the qGPU
// vocabulary (qgpu.io/…, tke.cloud.tencent.com/…) in prose.
var apiName = regexp.MustCompile(`\b(?:[a-z0-9.-]+\.)?(?:qgpu\.io|tke\.cloud\.tencent\.com)/[a-z0-9][a-z0-9._-]*[a-z0-9]`)

// apiPrefix matches a Go string literal that is only such a name's prefix
// ("vocabulary.qgpu.io/"), to which the code appends the rest.
var apiPrefix = regexp.MustCompile(`"((?:[a-z0-9.-]+\.)?(?:qgpu\.io|tke\.cloud\.tencent\.com)/)"`)

// composed are names the code builds from parts that the pattern cannot
// see whole, with where.
var composed = map[string]string{
	"kubectl.qgpu.io/v1alpha1": "cmd/kubectl-qgpu/app/types.go: GroupVersion{Group, Version}",
}

// TestNamesExistInCode: every such name that README.md, docs/ and the
// manifests' READMEs mention is written somewhere in the code or the
// manifests (Go files other than tests, YAML), so a page cannot name an
// annotation, label or resource the code does not use (as real-node.md
// once named tke.cloud.tencent.com/qgpu-assignment for qgpu.io/assignment).
func TestNamesExistInCode(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{}
	var prefixes []string
	pages := map[string][]string{} // name → pages that use it
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "_output" || d.Name() == "bin" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		isCode := strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") ||
			strings.HasSuffix(p, ".yaml") && !strings.HasPrefix(rel, "manifests/examples")
		isPage := strings.HasSuffix(p, ".md")
		if !isCode && !isPage {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if isCode {
			for _, m := range apiPrefix.FindAllStringSubmatch(string(raw), -1) {
				prefixes = append(prefixes, m[1])
			}
		}
		for _, name := range apiName.FindAllString(string(raw), -1) {
			if isCode {
				code[name] = true
			} else {
				pages[name] = append(pages[name], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(code) < 10 || len(pages) < 10 {
		t.Fatalf("found %d names in the code and %d in the pages: the pattern or the walk is wrong", len(code), len(pages))
	}
	var missing []string
	for name, where := range pages {
		if !code[name] && composed[name] == "" && !hasPrefix(name, prefixes) {
			missing = append(missing, name+" (in "+strings.Join(uniq(where), ", ")+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("the docs name %s, which no code or manifest uses", m)
	}
}

// hasPrefix: name is a prefix the code writes followed by one name part.
func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && !strings.Contains(rest, "/") {
			return true
		}
	}
	return false
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
