package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pinnedTag is the image tag manifests/ pins the shipped images to.
func pinnedTag(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "scheduler", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`image: ghcr.io/qgpu-scheduler/qgpu-scheduler:(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("manifests/scheduler/deployment.yaml pins no qgpu-scheduler image")
	}
	return string(m[1])
}

// The committed manifest is a krew Plugin for the release the manifests
// pin, with a platform per os/arch, each installing kubectl-qgpu from
// that release.
func TestCommittedManifest(t *testing.T) {
	p, err := Read("qgpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Name != "qgpu" {
		t.Errorf("metadata.name %q: kubectl finds the plugin kubectl-qgpu as `kubectl qgpu`, so its krew name is qgpu", p.Metadata.Name)
	}
	if tag := pinnedTag(t); p.Spec.Version != tag {
		t.Errorf("spec.version %s, the manifests pin %s", p.Spec.Version, tag)
	}
	seen := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		if seen[key] {
			t.Errorf("platform %s listed twice", key)
		}
		seen[key] = true
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !seen[want] {
			t.Errorf("no platform %s", want)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(p *Plugin)
		wantErr string
	}{
		{"committed", func(*Plugin) {}, ""},
		{"kind", func(p *Plugin) { p.Kind = "Pod" }, "apiVersion/kind: invalid value"},
		{"version", func(p *Plugin) { p.Spec.Version = "0.1" }, `spec.version: invalid value "0.1"`},
		{"no platform", func(p *Plugin) { p.Spec.Platforms = nil }, "spec.platforms: required"},
		{"bin", func(p *Plugin) { p.Spec.Platforms[1].Bin = "qgpu" }, `spec.platforms[1].bin: invalid value "qgpu"`},
		{"uri of another version", func(p *Plugin) { p.Spec.Version = "v0.2.0" }, "spec.platforms[0].uri: invalid value"},
		{"sha256", func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "abc" }, `spec.platforms[0].sha256: invalid value "abc"`},
		{"selector", func(p *Plugin) { delete(p.Spec.Platforms[2].Selector.MatchLabels, "arch") }, "spec.platforms[2].selector.matchLabels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Read("qgpu.yaml")
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(p)
			err = p.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A release packs each platform's binary and records the archive's sha256
// and the uri of the version given.
func TestRelease(t *testing.T) {
	dir := t.TempDir()
	bin, out := filepath.Join(dir, "bin"), filepath.Join(dir, "out")
	p, err := Read("qgpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range p.Spec.Platforms {
		d := filepath.Join(bin, pl.Selector.MatchLabels["os"]+"_"+pl.Selector.MatchLabels["arch"])
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, binName), []byte("binary for "+d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := run("qgpu.yaml", "v0.2.0", bin, out); err != nil {
		t.Fatal(err)
	}
	got, err := Read(filepath.Join(out, "qgpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Version != "v0.2.0" {
		t.Errorf("version %s, want v0.2.0", got.Spec.Version)
	}
	for _, pl := range got.Spec.Platforms {
		name := ArchiveName("v0.2.0", pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"])
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if pl.Sha256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha256 %s, the archive's is %x", name, pl.Sha256, sum)
		}
		if !strings.HasSuffix(pl.URI, "/download/v0.2.0/"+name) {
			t.Errorf("uri %s, want the v0.2.0 release's %s", pl.URI, name)
		}
	}
	if err := run("qgpu.yaml", "latest", bin, out); err == nil || !strings.Contains(err.Error(), `--version: invalid value "latest"`) {
		t.Errorf("run with version latest: %v, want an error naming --version", err)
	}
	if err := run("qgpu.yaml", "v0.3.0", filepath.Join(dir, "nothing"), out); err == nil || !strings.Contains(err.Error(), "platform linux/amd64") {
		t.Errorf("run without binaries: %v, want an error naming the platform", err)
	}
}
