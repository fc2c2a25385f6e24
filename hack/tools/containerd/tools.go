//go:build tools

// Package tools pins containerd for make e2e-node (test/e2enode): the
// runtime of the real node, built from its Go module because Debian's
// containerd (1.6) is older than the CRI and CDI support the node needs.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
