#!/usr/bin/env bash
# Copies the default profile (config/qgpu-scheduler.yaml) to
# manifests/scheduler/config.yaml, the file the scheduler kustomization's
# configMapGenerator makes qgpu-scheduler-config-<hash> of: the deployed
# configuration is the tested one, and a change of it rolls the Deployment.
# `make manifests` runs it; TestManifestsConfigFresh fails when the copy is
# stale. To run other arguments, replace the file from an overlay
# (docs/install.md#scheduler-configuration), not here.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-config/qgpu-scheduler.yaml}
{
	echo "# Copied from $profile by hack/gen-manifests.sh (make manifests)."
	echo "# To change it, replace it from an overlay: docs/install.md#scheduler-configuration."
	cat "$profile"
} > manifests/scheduler/config.yaml
