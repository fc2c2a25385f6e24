// Command images builds the project's OCI images without a Docker engine
// (make images, make push; docs/real-node.md): it puts each binary that
// make build compiled (with the version stamped in) into a layer with CA
// certificates and the shared libraries ldd names (the agent links libc for
// go-nvml's cgo; the others are static), and writes one tarball per image,
// or pushes the shipped ones to a registry.
//
// It is a module of its own so that go-containerregistry's dependencies do
// not move the main module's (Kubernetes') versions.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// spec is one image: the binary it runs (a file in --bin-dir), and whether
// it is shipped (pushed) or only used by the e2e node.
type spec struct {
	name    string
	bin     string
	shipped bool
	user    string
}

var specs = []spec{
	{name: "qgpu-scheduler", bin: "qgpu-scheduler", shipped: true, user: "65532:65532"},
	// go-nvml needs cgo; NVML itself is dlopen()ed from the driver the
	// NVIDIA container runtime mounts, so the binary stays dynamic.
	{name: "qgpu-agent", bin: "qgpu-agent", shipped: true},
	{name: "kubectl-qgpu", bin: "kubectl-qgpu", shipped: true, user: "65532:65532"},
	{name: "pause", bin: "qgpu-e2e-pause", user: "65535:65535"},
	{name: "probe", bin: "qgpu-e2e-probe"},
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	binDir := fs.String("bin-dir", "bin", "the built binaries (make build)")
	out := fs.String("out", "_output/images", "where the tarballs go")
	repo := fs.String("repo", "ghcr.io/qgpu-scheduler", "image repository prefix: <repo>/<name>:<version>")
	ver := fs.String("version", "", "image tag: the version make build stamped into the binaries (required)")
	push := fs.Bool("push", false, "push the shipped images to --repo (credentials: the default keychain, ~/.docker/config.json)")
	only := fs.String("only", "", "comma-separated image names to build (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ver == "" {
		return fmt.Errorf("--version is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, s := range specs {
		if *only != "" && !contains(strings.Split(*only, ","), s.name) {
			continue
		}
		if *push && !s.shipped {
			continue
		}
		ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", *repo, s.name, *ver))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		img, err := build(s, filepath.Join(*binDir, s.bin), *ver)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if *push {
			if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
				return fmt.Errorf("pushing %s: %w", ref, err)
			}
			fmt.Println("pushed", ref)
			continue
		}
		file := filepath.Join(*out, s.name+".tar")
		if err := tarball.WriteToFile(file, ref, img); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
		fmt.Println(ref, "->", file)
	}
	return nil
}

func build(s spec, bin, ver string) (v1.Image, error) {
	files := []file{{path: "/usr/local/bin/" + s.name, src: bin, mode: 0o755}, {path: caBundle, src: caBundle, mode: 0o644}}
	libs, err := sharedLibs(bin)
	if err != nil {
		return nil, err
	}
	return image(append(files, libs...), s, ver)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
