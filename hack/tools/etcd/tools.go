//go:build tools

// Package tools pins the etcd that make bench-perf runs Kubernetes'
// scheduler_perf against (docs/performance.md#scheduler_perf): its
// framework.StartEtcd starts a fresh etcd binary, found on PATH, for each
// workload. The version is the etcd server the project's go.mod already
// uses for the harness's embedded etcd.
package tools

import _ "go.etcd.io/etcd/server/v3"
