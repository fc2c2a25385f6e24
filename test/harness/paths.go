package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RepoRoot returns the directory holding go.mod, searched upwards from the
// working directory (a test runs in its package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getting working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory")
		}
		dir = parent
	}
}

// BinaryPath finds a program built into bin/ by `make build`: explicit if
// set, else $envVar, else bin/<name> under the repository root. Tests never
// build binaries themselves (that would cost minutes per package on two
// cores), so a missing one is an error that says what to run.
func BinaryPath(explicit, envVar, name string) (string, error) {
	return binaryPath(explicit, envVar, name)
}

func binaryPath(explicit, envVar, name string) (string, error) {
	p := explicit
	if p == "" {
		p = os.Getenv(envVar)
	}
	if p == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		p = filepath.Join(root, "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found at %s (run `make build`, or set $%s): %w", name, p, envVar, err)
	}
	return p, nil
}
