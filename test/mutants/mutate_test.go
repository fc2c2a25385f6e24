package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMutate(t *testing.T) {
	src := "package p\n\nfunc f(a, b int) bool {\n\tif a > b {\n\t\treturn true\n\t}\n\treturn true\n}\n"
	for _, tc := range []struct {
		name     string
		old, new string
		want     string // the changed file
		line     int
		err      string
	}{
		{name: "once", old: "if a > b {", new: "if a >= b {", line: 4,
			want: "package p\n\nfunc f(a, b int) bool {\n\tif a >= b {\n\t\treturn true\n\t}\n\treturn true\n}\n"},
		{name: "across lines", old: "\t}\n\treturn true\n}", new: "\t}\n\treturn false\n}", line: 6,
			want: "package p\n\nfunc f(a, b int) bool {\n\tif a > b {\n\t\treturn true\n\t}\n\treturn false\n}\n"},
		{name: "not found", old: "if a < b {", err: "found 0 times"},
		{name: "twice", old: "return true", err: "found 2 times"},
		{name: "empty", old: "", err: "empty original text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, line, err := mutate([]byte(src), mutant{Old: tc.old, New: tc.new})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("mutate: %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("changed file (-want +got):\n%s", diff)
			}
			if line != tc.line {
				t.Errorf("line %d, want %d", line, tc.line)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	failed := errors.New("exit status 1")
	for _, tc := range []struct {
		name       string
		out        string
		err        error
		status, by string
	}{
		{name: "tests pass", out: "ok  \tx/p\t0.1s\n", status: "SURVIVED"},
		{name: "a test fails", out: "--- FAIL: TestA (0.00s)\n    --- FAIL: TestA/case (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\n", err: failed,
			status: "killed", by: "TestA, TestB"},
		{name: "a panic", out: "panic: boom\nFAIL\tx/p\t0.1s\n", err: failed, status: "killed", by: "panic: boom"},
		{name: "no build", out: "# x/p\np/p.go:3:2: undefined: y\nFAIL\tx/p [build failed]\n", err: failed,
			status: "INVALID", by: "does not compile: # x/p | p/p.go:3:2: undefined: y | FAIL\tx/p [build failed]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, by := judge(tc.out, tc.err)
			if diff := cmp.Diff([2]string{tc.status, tc.by}, [2]string{status, by}); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}
