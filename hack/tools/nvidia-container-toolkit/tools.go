//go:build tools

// Package tools pins NVIDIA's container toolkit for make e2e-node
// (test/e2enode): nvidia-container-runtime, nvidia-cdi-hook and nvidia-ctk,
// built from their Go module as containerd is, so that one e2e node runs
// NVIDIA's runtime as GPU Operator configures it (docs/real-node.md).
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
)
