package main

import (
	"archive/tar"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// binDir holds stand-ins for make build's binaries: scripts, which ldd
// calls not dynamic, so each image is the file plus the CA bundle.
func binDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, s := range specs {
		if err := os.WriteFile(filepath.Join(d, s.bin), []byte("#!/bin/sh\necho "+s.name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// files returns the image's files (path → content) from its flattened layers.
func files(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(b)
		}
	}
}

func checkImage(t *testing.T, img v1.Image, image, version string) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/local/bin/"+image {
		t.Errorf("%s: entrypoint %q", image, got)
	}
	if cfg.OS != "linux" || cfg.Config.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("%s: os %q, labels %v", image, cfg.OS, cfg.Config.Labels)
	}
	fs := files(t, img)
	if !strings.Contains(fs["usr/local/bin/"+image], "echo "+image) {
		t.Errorf("%s: binary not in the image: %v", image, keys(fs))
	}
	if !strings.Contains(fs["etc/ssl/certs/ca-certificates.crt"], "BEGIN CERTIFICATE") {
		t.Errorf("%s: no CA bundle", image)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTarballs(t *testing.T) {
	out := t.TempDir()
	if err := run([]string{"--bin-dir", binDir(t), "--out", out, "--repo", "example.test/qgpu", "--version", "v1.2.3-4-gabc"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		tag, err := name.NewTag("example.test/qgpu/" + s.name + ":v1.2.3-4-gabc")
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(filepath.Join(out, s.name+".tar"), &tag)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkImage(t, img, s.name, "v1.2.3-4-gabc")
	}
}

// make push writes the three shipped images to the registry, and only those.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/qgpu"
	if err := run([]string{"--bin-dir", binDir(t), "--repo", repo, "--version", "v9", "--push"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		ref, err := name.ParseReference(repo + "/" + s.name + ":v9")
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref)
		if !s.shipped {
			if err == nil {
				t.Errorf("%s (a test image) was pushed", s.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkImage(t, img, s.name, "v9")
	}
}

func TestSharedLibs(t *testing.T) {
	libs, err := sharedLibs("/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	var libc bool
	for _, f := range libs {
		libc = libc || strings.Contains(f.path, "libc.so")
	}
	if !libc {
		t.Errorf("libc not among /bin/ls's libraries: %+v", libs)
	}
	if _, err := sharedLibs(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing binary was accepted")
	}
	if err := run([]string{"--bin-dir", t.TempDir()}); err == nil {
		t.Error("no --version accepted")
	}
}
