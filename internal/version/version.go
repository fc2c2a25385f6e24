// Package version holds the version stamped into every binary at build time:
// the Makefile and hack/images pass
// -ldflags "-X github.com/qgpu-scheduler/qgpu/internal/version.Version=<git describe>".
package version

// Version is `git describe --tags --always --dirty` of the build. Builds
// without the flag (go run, go test) say "unknown".
var Version = "unknown"

// String is the line `--version` prints.
func String(program string) string { return program + " " + Version }
