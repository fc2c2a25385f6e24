package app

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// helpFlag is a flag's long name at the start of a --help line.
var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([\w-]+)`)

// A subcommand's --help lists the flags it parses, and only those: cobra
// gave it the agent's help function, which listed the agent's flags, all
// refused by the subcommand.
func TestSubcommandsOwnFlags(t *testing.T) {
	cases := []struct {
		sub        string
		want, not  []string // flags that must and must not be listed
		parses     []string
		wantRefuse string
	}{
		{"mps-control-daemon", []string{"mps-root", "mps-control-bin", "fake-cards", "node-name", "v", "logging-format", "help"},
			[]string{"backend", "dbfile", "metrics-addr", "version"},
			[]string{"--mps-root=/run/x", "-v=3", "--logging-format=text", "--fake-cards=2xT4"}, "--backend=mps"},
		{"uninstall", []string{"node-name", "kubeconfig", "dbfile", "force", "wait", "help"},
			[]string{"backend", "metrics-addr", "mps-root", "version"},
			[]string{"--force", "--dbfile=/x/meta.db"}, "--metrics-addr=:1"},
	}
	for _, tc := range cases {
		t.Run(tc.sub, func(t *testing.T) {
			var out bytes.Buffer
			root := newCommand(newOptions(), &out)
			root.SetOut(&out)
			root.SetArgs([]string{tc.sub, "--help"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			help := out.String()
			var listed []string
			for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
				listed = append(listed, m[1])
			}
			sub, _, err := newCommand(newOptions(), &bytes.Buffer{}).Find([]string{tc.sub})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range listed {
				if sub.Flags().Lookup(f) == nil {
					t.Errorf("--help lists --%s, which %s does not parse", f, tc.sub)
				}
			}
			sub.Flags().VisitAll(func(f *pflag.Flag) {
				if !slices.Contains(listed, f.Name) {
					t.Errorf("%s parses --%s, which its --help does not list", tc.sub, f.Name)
				}
			})
			for _, f := range tc.want {
				if !slices.Contains(listed, f) {
					t.Errorf("--help does not list --%s", f)
				}
			}
			for _, f := range tc.not {
				if slices.Contains(listed, f) {
					t.Errorf("--help lists the agent's --%s", f)
				}
			}
			if !strings.Contains(help, "qgpu-agent "+tc.sub+" [flags]") {
				t.Errorf("no usage line in\n%s", help)
			}
			if err := sub.ParseFlags(tc.parses); err != nil {
				t.Errorf("%v: %v", tc.parses, err)
			}
			if err := sub.ParseFlags([]string{tc.wantRefuse}); err == nil || !strings.Contains(err.Error(), "unknown flag") {
				t.Errorf("%s: %v, want unknown flag", tc.wantRefuse, err)
			}
		})
	}
}
