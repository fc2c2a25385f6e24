package main

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fixture writes a module with one package, p, its in-package tests and an
// external test, and returns its root.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{
		"go.mod": "module example.com/fix\n\ngo 1.25\n",
		"p/p.go": `package p

// Cap is a card's capacity.
const Cap = 100

// Fits reports whether want more fits beside used.
func Fits(used, want int) bool {
	if used+want > Cap {
		return false
	}
	return true
}

func double(n int) int { return 2 * n }

// Exported is used by the external test only.
func Exported() int { return 1 }
`,
		"p/p_test.go": `package p

import "testing"

func TestDouble(t *testing.T) {
	if double(2) != 4 {
		t.Fail()
	}
}
`,
		"p/ext_test.go": `package p_test

import (
	"testing"

	"example.com/fix/p"
)

func TestExported(t *testing.T) {
	if p.Exported() != 1 {
		t.Fail()
	}
}
`,
	}
	for name, src := range files {
		all[name] = src
	}
	for name, src := range all {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Each mutant of the list is checked without running a test: its text
// found exactly once, its changed file compiling with the package's own
// tests and its external tests.
func TestValidate(t *testing.T) {
	root := fixture(t, nil)
	todo := []mutant{
		{Why: "applies", File: "p/p.go", Old: "if used+want > Cap {", New: "if used+want > Cap+1 {"},
		{Why: "not found", File: "p/p.go", Old: "if used > Cap {", New: "if false {"},
		{Why: "found twice", File: "p/p.go", Old: "int {", New: "int64 {"},
		{Why: "no such file", File: "p/gone.go", Old: "x", New: "y"},
		{Why: "undefined name", File: "p/p.go", Old: "if used+want > Cap {", New: "if used+wanted > Cap {"},
		{Why: "unused variable", File: "p/p.go", Old: "if used+want > Cap {", New: "if n := used; want > Cap {"},
		{Why: "does not parse", File: "p/p.go", Old: "if used+want > Cap {", New: "if used+want > Cap"},
		{Why: "breaks the in-package tests", File: "p/p.go", Old: "func double(", New: "func twice("},
		{Why: "breaks the external test", File: "p/p.go", Old: "func Exported() int", New: "func exported() int"},
		{Why: "in a test file", File: "p/p_test.go", Old: "double(2) != 4", New: "double(2) != 5"},
	}
	results, err := validate(root, todo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"applies":                     "applies line 8",
		"not found":                   "INVALID found 0 times",
		"found twice":                 "INVALID found 2 times",
		"no such file":                "INVALID no such file",
		"undefined name":              "INVALID undefined: wanted",
		"unused variable":             "INVALID declared and not used: n",
		"does not parse":              "INVALID does not parse",
		"breaks the in-package tests": "INVALID undefined: double",
		"breaks the external test":    "INVALID undefined: p.Exported",
		"in a test file":              "applies line 6",
	}
	if len(results) != len(todo) {
		t.Fatalf("%d results for %d mutants", len(results), len(todo))
	}
	for _, r := range results {
		status, text, _ := strings.Cut(want[r.m.Why], " ")
		got := r.by
		if r.status == "applies" {
			got = "line " + strconv.Itoa(r.line)
		}
		if r.status != status || !strings.Contains(got, text) {
			t.Errorf("%s: %s %q, want %s with %q", r.m.Why, r.status, got, status, text)
		}
	}
	if code := report(io.Discard, results, true, 0); code != 1 {
		t.Errorf("report of a list with invalid entries: exit %d, want 1", code)
	}
	if code := report(io.Discard, results[:1], true, 0); code != 0 {
		t.Errorf("report of a valid list: exit %d, want 0", code)
	}
}

// The unchanged packages must compile: the list cannot be judged otherwise,
// and no entry is to blame.
func TestValidateBrokenPackage(t *testing.T) {
	root := fixture(t, map[string]string{"p/broken.go": "package p\n\nvar _ = missing\n"})
	_, err := validate(root, []mutant{{File: "p/p.go", Old: "if used+want > Cap {", New: "if false {"}})
	if err == nil || !strings.Contains(err.Error(), "do not compile unchanged") || !strings.Contains(err.Error(), "undefined: missing") {
		t.Fatalf("validate on a package that does not compile: %v", err)
	}
}
