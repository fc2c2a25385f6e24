#!/usr/bin/env bash
# Copies the tested profiles into the kustomizations that deploy them:
# config/qgpu-scheduler.yaml to manifests/scheduler/config.yaml, the file
# the scheduler kustomization's configMapGenerator makes
# qgpu-scheduler-config-<hash> of, and config/qgpu-scheduler-as-default.yaml
# to the replace-default-scheduler overlay's config.yaml. The deployed
# configuration is the tested one, and a change of it rolls the Deployment.
# `make manifests` runs it; TestManifestsConfigFresh fails when a copy is
# stale. To run other arguments, replace the file from an overlay
# (docs/install.md#scheduler-configuration), not here.
set -euo pipefail
cd "$(dirname "$0")/.."

# copy <profile> <destination>
copy() {
	{
		echo "# Copied from $1 by hack/gen-manifests.sh (make manifests)."
		echo "# To change it, replace it from an overlay: docs/install.md#scheduler-configuration."
		cat "$1"
	} > "$2"
}

copy "${1:-config/qgpu-scheduler.yaml}" manifests/scheduler/config.yaml
copy config/qgpu-scheduler-as-default.yaml manifests/overlays/replace-default-scheduler/config.yaml
