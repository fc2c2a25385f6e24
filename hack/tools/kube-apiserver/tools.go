//go:build tools

// Package tools pins the kube-apiserver that make integration-skew runs the
// integration suite against (docs/install.md#supported-versions): the
// newer apiserver minor that the qgpu-scheduler build may run beside, by
// Kubernetes' version-skew policy (a kube-scheduler may be one minor older
// than its kube-apiserver, never newer). test/harness starts it as a
// subprocess when QGPU_KUBE_APISERVER_BIN names it.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
