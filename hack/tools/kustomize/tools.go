//go:build tools

// Package tools pins the kustomize CLI for the README's deploy section
// (test/integration TestREADMEDeploy runs it command by command): kubectl
// builds kustomize in for `kubectl apply -k`, but `kustomize edit set
// image`, which the README tells users to run, needs the CLI. v5.7.1 is
// the release of the kustomize/api v0.20.1 the repository renders with.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
