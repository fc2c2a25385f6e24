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
// follow the code.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	status  string // killed, SURVIVED, INVALID
	by      string // the failing tests, or why invalid
	elapsed time.Duration
}

func main() {
	only := flag.String("only", "", "run only the mutants whose file or reason contains this text")
	list := flag.Bool("list", false, "check that every mutant applies and list them, without running tests")
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
	scratch, err := os.MkdirTemp("", "qgpu-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(scratch)
	if !listOnly {
		if out, err := goTest(root, "", packagesOf(todo), ""); err != nil {
			fmt.Printf("mutants: the tests fail without any mutant; fix them first:\n%s\n", out)
			return 2
		}
		fmt.Printf("baseline: the tests of %d packages pass unchanged\n", len(packagesOf(todo)))
	}
	var results []result
	for i, m := range todo {
		r := result{m: m}
		overlay, line, err := apply(root, scratch, i, m)
		switch {
		case err != nil:
			r.status, r.by = "INVALID", err.Error()
		case listOnly:
			r.status = "applies"
		default:
			start := time.Now()
			r.status, r.by = judge(goTest(root, overlay, m.Pkgs, m.Run))
			r.elapsed = time.Since(start)
		}
		r.line = line
		results = append(results, r)
		if !listOnly {
			fmt.Printf("%d/%d %s %s:%d (%s)\n", i+1, len(todo), r.status, m.File, line, r.elapsed.Round(time.Second))
		}
	}
	return report(results, listOnly)
}

// apply writes the mutated file and an overlay that puts it in place of the
// original, and returns the overlay's path and the line changed.
func apply(root, scratch string, i int, m mutant) (string, int, error) {
	path := filepath.Join(root, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	if n := bytes.Count(src, []byte(m.Old)); n != 1 {
		return "", 0, fmt.Errorf("original text found %d times, want once: %q", n, m.Old)
	}
	at := bytes.Index(src, []byte(m.Old))
	line := 1 + bytes.Count(src[:at], []byte("\n"))
	mutated := filepath.Join(scratch, fmt.Sprintf("m%03d_%s", i, filepath.Base(m.File)))
	if err := os.WriteFile(mutated, bytes.Replace(src, []byte(m.Old), []byte(m.New), 1), 0o644); err != nil {
		return "", 0, err
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
	if err != nil {
		return "", 0, err
	}
	overlay := filepath.Join(scratch, fmt.Sprintf("m%03d.json", i))
	return overlay, line, os.WriteFile(overlay, b, 0o644)
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

func report(results []result, listOnly bool) int {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSTATUS\tLINE\tGUARDS\tNOTICED BY")
	counts := map[string]int{}
	for _, r := range results {
		counts[r.status]++
		fmt.Fprintf(w, "%s\t%s:%d\t%s\t%s\n", r.status, r.m.File, r.line, r.m.Why, r.by)
	}
	_ = w.Flush()
	if listOnly {
		fmt.Printf("mutants %d apply %d invalid %d\n", len(results), counts["applies"], counts["INVALID"])
		return min(counts["INVALID"], 1)
	}
	if counts["INVALID"] > 0 {
		fmt.Printf("mutants: %d invalid (see above): the list must follow the code\n", counts["INVALID"])
	}
	fmt.Printf("mutants %d killed %d survived %d\n", len(results), counts["killed"], counts["SURVIVED"])
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
