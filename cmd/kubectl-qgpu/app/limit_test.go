package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMaxPodsPerCard(t *testing.T) {
	cases := []struct {
		name, config string
		want         int
		wantErr      string
	}{
		{"no profile", "apiVersion: kubescheduler.config.k8s.io/v1\n", 0, ""},
		{"unset: the default rule", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args:\n      nodePolicy: binpack\n", 0, ""},
		{"set", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args:\n      maxPodsPerCard: 6\n", 6, ""},
		{"other plugins are ignored", "profiles:\n- pluginConfig:\n  - name: Other\n    args:\n      maxPodsPerCard: 9\n  - name: QGPU\n    args:\n      maxPodsPerCard: 5\n", 5, ""},
		{"profiles agree", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3}\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3}\n", 3, ""},
		{"profiles disagree", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3}\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 4}\n", 0,
			"profiles[1].pluginConfig[0].args.maxPodsPerCard: invalid value 4: profiles[0].pluginConfig[0].args.maxPodsPerCard is 3"},
		// The plugin's own validation, in its words.
		{"negative", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: -1}\n", 0, "profiles[0].pluginConfig[0].args.maxPodsPerCard: Invalid value: -1: must be between 0"},
		{"above the plugin's bound", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 2000}\n", 0, "args.maxPodsPerCard: Invalid value: 2000"},
		{"a policy the plugin refuses beside it", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3, nodePolicy: tightest}\n", 0, `args.nodePolicy: Unsupported value: "tightest"`},
		// Decoded strictly, as the scheduler decodes args: a misspelt field is not a silent default.
		{"misspelt field", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3, maxPodPerCard: 5}\n", 0, `unknown field "maxPodPerCard"`},
		{"not yaml", "profiles: [", 0, "parsing the scheduler configuration"},
		{"wrong type", "profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: many}\n", 0, "parsing the scheduler configuration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMaxPodsPerCard([]byte(tc.config))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// The shipped profile parses, and says what the plugin's default is.
func TestParseShippedProfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "qgpu-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := parseMaxPodsPerCard(b); err != nil || n != 0 {
		t.Errorf("config/qgpu-scheduler.yaml: %d, %v; want 0 (the default rule)", n, err)
	}
}

func FuzzParseMaxPodsPerCard(f *testing.F) {
	f.Add([]byte("profiles:\n- pluginConfig:\n  - name: QGPU\n    args: {maxPodsPerCard: 3}\n"))
	f.Add([]byte("profiles: [{pluginConfig: [{name: QGPU, args: {maxPodsPerCard: -4}}]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseMaxPodsPerCard(data)
		if err == nil && n < 0 {
			t.Errorf("accepted a negative limit %d", n)
		}
	})
}
