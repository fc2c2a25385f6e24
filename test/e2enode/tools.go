//go:build tools

// The Kubernetes components make e2e-node builds from the pinned
// k8s.io/kubernetes module (listed here so that go mod tidy keeps their
// dependencies in go.sum).
package main

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
