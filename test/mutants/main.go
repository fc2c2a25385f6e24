// mutants checks that the tests guard the lines that keep cards from being
// oversubscribed. Each mutant (list.go) changes one production line the way
// a plausible bug would; the runner compiles the changed file in place of
// the original through the go command's -overlay (the tree is never
// written), runs the tests of the packages named with the mutant, and
// reports the mutant killed when a test fails. Every listed mutant must be
// killed. `make mutants` runs it; its last line is
// `mutants N killed K survived S`.
//
// A mutant whose original text is not found exactly once, or whose changed
// file does not compile, is an error of the list, not a kill: the list must
// follow the code. Both are checked first, in seconds and without running a
// test (validate, typecheck.go); `-list` (make mutants-list, part of make
// test) stops there.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// mutant is one changed line and the tests that must notice it.
type mutant struct {
	File string // relative to the repository root
	Old  string // the exact original text, found exactly once
	New  string
	// Pkgs are the packages whose tests run; Run narrows them (go test -run).
	Pkgs []string
	Run  string
	Why  string // what the line guards
}

type result struct {
	m       mutant
	line    int
	status  string // applies (checked, not yet tested), killed, SURVIVED, INVALID
	by      string // the failing tests, or why invalid
	elapsed time.Duration
	mutated []byte // the changed file, once it applies
}

func main() {
	only := flag.String("only", "", "run only the mutants whose file or reason contains this text")
	list := flag.Bool("list", false, "check that every mutant applies exactly once and compiles, and list them, without running tests")
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	var todo []mutant
	for _, m := range mutants {
		if *only == "" || strings.Contains(m.File, *only) || strings.Contains(m.Why, *only) {
			todo = append(todo, m)
		}
	}
	os.Exit(run(root, todo, *list))
}

func run(root string, todo []mutant, listOnly bool) int {
	start := time.Now()
	results, err := validate(root, todo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	if listOnly {
		return report(os.Stdout, results, true, time.Since(start))
	}
	scratch, err := os.MkdirTemp("", "qgpu-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(scratch)
	if out, err := goTest(root, "", packagesOf(todo), ""); err != nil {
		fmt.Printf("mutants: the tests fail without any mutant; fix them first:\n%s\n", out)
		return 2
	}
	fmt.Printf("baseline: the tests of %d packages pass unchanged\n", len(packagesOf(todo)))
	for i := range results {
		r, m := &results[i], results[i].m
		if r.status == "applies" {
			t := time.Now()
			overlay, err := writeOverlay(scratch, i, filepath.Join(root, m.File), r.mutated)
			if err != nil {
				r.status, r.by = "INVALID", err.Error()
			} else {
				r.status, r.by = judge(goTest(root, overlay, m.Pkgs, m.Run))
			}
			r.elapsed = time.Since(t)
		}
		fmt.Printf("%d/%d %s %s:%d (%s)\n", i+1, len(todo), r.status, m.File, r.line, r.elapsed.Round(time.Second))
	}
	return report(os.Stdout, results, false, time.Since(start))
}

// validate checks, without running any test, that every mutant's original
// text is found exactly once and that its changed file compiles in its
// package (typecheck.go). A mutant that fails either is INVALID: an error
// of the list, never a kill. The error is for what no entry can fix (the
// unchanged packages do not load).
func validate(root string, todo []mutant) ([]result, error) {
	results := make([]result, len(todo))
	var dirs []string
	for i, m := range todo {
		results[i].m = m
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err == nil {
			results[i].mutated, results[i].line, err = mutate(src, m)
		}
		if err != nil {
			results[i].status, results[i].by = "INVALID", err.Error()
			continue
		}
		if d := filepath.Dir(m.File); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return results, nil
	}
	c, err := loadCompiler(root, dirs)
	if err != nil {
		return nil, err
	}
	for i := range results {
		r := &results[i]
		if r.status == "INVALID" {
			continue
		}
		r.status = "applies"
		if err := c.check(filepath.Join(root, r.m.File), r.mutated); err != nil {
			r.status, r.by = "INVALID", err.Error()
		}
	}
	return results, nil
}

func goTest(root, overlay string, pkgs []string, runRE string) (string, error) {
	args := []string{"test", "-count=1"}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	if runRE != "" {
		args = append(args, "-run="+runRE)
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var (
	buildFailed = regexp.MustCompile(`\[(build|setup) failed\]|^# `)
	failedTest  = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
)

// judge reads a test run of a mutant: killed when a test failed, invalid
// when the mutant did not compile.
func judge(out string, err error) (string, string) {
	if err == nil {
		return "SURVIVED", ""
	}
	for _, l := range strings.Split(out, "\n") {
		if buildFailed.MatchString(l) {
			return "INVALID", "does not compile: " + firstLines(out, 3)
		}
	}
	var names []string
	for _, m := range failedTest.FindAllStringSubmatch(out, -1) {
		if !strings.Contains(m[1], "/") || len(names) == 0 {
			names = append(names, m[1])
		}
		if len(names) == 2 {
			break
		}
	}
	if len(names) == 0 {
		return "killed", firstLines(out, 1)
	}
	return "killed", strings.Join(names, ", ")
}

func report(out io.Writer, results []result, listOnly bool, took time.Duration) int {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSTATUS\tLINE\tGUARDS\tNOTICED BY")
	counts := map[string]int{}
	for _, r := range results {
		counts[r.status]++
		fmt.Fprintf(w, "%s\t%s:%d\t%s\t%s\n", r.status, r.m.File, r.line, r.m.Why, r.by)
	}
	_ = w.Flush()
	if counts["INVALID"] > 0 {
		fmt.Fprintf(out, "mutants: %d invalid (see above): the list must follow the code\n", counts["INVALID"])
	}
	if listOnly {
		fmt.Fprintf(out, "mutants: checked in %s (text found once, changed file type-checked), no tests run\n", took.Round(100*time.Millisecond))
		fmt.Fprintf(out, "mutants %d apply %d invalid %d\n", len(results), counts["applies"], counts["INVALID"])
		return min(counts["INVALID"], 1)
	}
	fmt.Fprintf(out, "mutants: ran in %s\n", took.Round(time.Second))
	fmt.Fprintf(out, "mutants %d killed %d survived %d\n", len(results), counts["killed"], counts["SURVIVED"])
	if counts["SURVIVED"]+counts["INVALID"] > 0 {
		return 1
	}
	return 0
}

func packagesOf(ms []mutant) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for _, p := range m.Pkgs {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module; run from the repository")
	}
	return filepath.Dir(mod), nil
}
