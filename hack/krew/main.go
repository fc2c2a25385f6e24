// Command krew completes kubectl-qgpu's krew plugin manifest (qgpu.yaml
// here) for a release: for each platform it packs the binary `make krew`
// built into kubectl-qgpu_<version>_<os>_<arch>.tar.gz and writes the
// manifest with the version, each platform's uri of that version and the
// archive's sha256.
//
//	go run ./hack/krew --manifest hack/krew/qgpu.yaml --version v0.1.0 \
//	  --bin-dir _output/krew/bin --out _output/krew
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"sigs.k8s.io/yaml"
)

// Plugin is the part of krew's Plugin (krew.googlecontainertools.github.com/v1alpha2) this
// tool reads and writes; unknown fields are refused rather than dropped.
type Plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec Spec `json:"spec"`
}

// Spec is the plugin's spec.
type Spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Caveats          string     `json:"caveats,omitempty"`
	Platforms        []Platform `json:"platforms"`
}

// Platform is one archive and the os/arch it runs on.
type Platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256,omitempty"`
	Bin    string `json:"bin"`
}

const (
	apiVersion = "krew.googlecontainertools.github.com/v1alpha2"
	binName    = "kubectl-qgpu"
)

// semver is the version format krew accepts (v-prefixed semantic version).
var semver = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Read reads and validates a manifest.
func Read(path string) (*Plugin, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &p, nil
}

// Validate checks the fields krew requires and that every platform's uri
// is the release archive of spec.version (ArchiveURI).
func (p *Plugin) Validate() error {
	switch {
	case p.APIVersion != apiVersion || p.Kind != "Plugin":
		return fmt.Errorf("apiVersion/kind: invalid value %s/%s: want %s/Plugin", p.APIVersion, p.Kind, apiVersion)
	case p.Metadata.Name == "":
		return fmt.Errorf("metadata.name: required")
	case !semver.MatchString(p.Spec.Version):
		return fmt.Errorf("spec.version: invalid value %q: want v<major>.<minor>.<patch>", p.Spec.Version)
	case p.Spec.Homepage == "" || p.Spec.ShortDescription == "":
		return fmt.Errorf("spec.homepage and spec.shortDescription: required")
	case len(p.Spec.Platforms) == 0:
		return fmt.Errorf("spec.platforms: required")
	}
	for i, pl := range p.Spec.Platforms {
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		path := fmt.Sprintf("spec.platforms[%d]", i)
		switch {
		case goos == "" || arch == "":
			return fmt.Errorf("%s.selector.matchLabels: invalid value %v: want os and arch", path, pl.Selector.MatchLabels)
		case pl.Bin != binName:
			return fmt.Errorf("%s.bin: invalid value %q: want %s", path, pl.Bin, binName)
		case pl.URI != p.ArchiveURI(goos, arch):
			return fmt.Errorf("%s.uri: invalid value %q: want %s", path, pl.URI, p.ArchiveURI(goos, arch))
		case pl.Sha256 != "" && !sha256Hex.MatchString(pl.Sha256):
			return fmt.Errorf("%s.sha256: invalid value %q: want 64 hex digits", path, pl.Sha256)
		}
	}
	return nil
}

// ArchiveName is the release archive of one platform.
func ArchiveName(version, goos, arch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", binName, version, goos, arch)
}

// ArchiveURI is where the GitHub release of spec.version holds the archive.
func (p *Plugin) ArchiveURI(goos, arch string) string {
	return fmt.Sprintf("%s/releases/download/%s/%s", p.Spec.Homepage, p.Spec.Version, ArchiveName(p.Spec.Version, goos, arch))
}

// Release stamps version, packs <binDir>/<os>_<arch>/kubectl-qgpu of every
// platform into out, and sets each platform's uri and sha256.
func (p *Plugin) Release(version, binDir, out string) error {
	p.Spec.Version = version
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for i := range p.Spec.Platforms {
		pl := &p.Spec.Platforms[i]
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		sum, err := pack(filepath.Join(binDir, goos+"_"+arch, binName), filepath.Join(out, ArchiveName(version, goos, arch)))
		if err != nil {
			return fmt.Errorf("platform %s/%s: %w", goos, arch, err)
		}
		pl.URI, pl.Sha256 = p.ArchiveURI(goos, arch), sum
	}
	return p.Validate()
}

// pack writes bin into a tar.gz at archive and returns the archive's sha256.
func pack(bin, archive string) (string, error) {
	src, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return "", err
	}
	f, err := os.Create(archive)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	// No owner or time from the build machine: the archive depends on the binary only.
	if err := tw.WriteHeader(&tar.Header{Name: binName, Mode: 0o755, Size: st.Size(), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

func main() {
	manifest := flag.String("manifest", "hack/krew/qgpu.yaml", "the plugin manifest to complete")
	version := flag.String("version", "", "the release version (a tag, v<major>.<minor>.<patch>)")
	binDir := flag.String("bin-dir", "_output/krew/bin", "holds <os>_<arch>/kubectl-qgpu per platform")
	out := flag.String("out", "_output/krew", "where the archives and the manifest go")
	flag.Parse()
	if err := run(*manifest, *version, *binDir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func run(manifest, version, binDir, out string) error {
	p, err := Read(manifest)
	if err != nil {
		return err
	}
	if !semver.MatchString(version) {
		return fmt.Errorf("--version: invalid value %q: krew wants v<major>.<minor>.<patch> (tag the release)", version)
	}
	if err := p.Release(version, binDir, out); err != nil {
		return err
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	dst := filepath.Join(out, filepath.Base(manifest))
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", dst)
	return nil
}
