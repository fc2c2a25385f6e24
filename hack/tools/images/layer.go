package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// caBundle is Debian's (package ca-certificates) CA bundle.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// file is one file of the image's only layer: its path in the image and the
// host file it is read from (symlinks followed).
type file struct {
	path string
	src  string
	mode int64
}

// sharedLibs lists what ldd says bin loads, the dynamic loader included,
// each at the path the binary looks for it; nothing for a static binary.
func sharedLibs(bin string) ([]file, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (run make build)", err)
	}
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if bytes.Contains(out, []byte("not a dynamic executable")) || bytes.Contains(out, []byte("statically linked")) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
	}
	var files []file
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		f := strings.Fields(sc.Text())
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			p = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			p = f[0]
		default:
			continue
		}
		files = append(files, file{path: p, src: p, mode: 0o755})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("ldd %s named no libraries: %s", bin, out)
	}
	return files, nil
}

func image(files []file, s spec, ver string) (v1.Image, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/usr/local/bin/" + s.name}
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + caBundle}
	cfg.Config.User = s.user
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   s.name,
		"org.opencontainers.image.version": ver,
		"org.opencontainers.image.source":  "https://github.com/qgpu-scheduler/qgpu",
	}
	return mutate.ConfigFile(img, cfg)
}

// layerTar writes files, and the directories above them, with fixed times
// and owners so that the same inputs give the same layer digest.
func layerTar(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	var dirList []string
	for _, f := range files {
		for d := path.Dir(f.path); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			dirList = append(dirList, d)
		}
	}
	dirList = append(dirList, "/tmp")
	sort.Strings(dirList)
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Clean(f.src))
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: f.mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
