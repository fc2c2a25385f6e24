#!/usr/bin/env bash
# make e2e-node (docs/real-node.md): checks for root, installs runc and the
# CNI plugins from Debian when missing, builds the pinned containerd
# (hack/tools/containerd), NVIDIA's container toolkit
# (hack/tools/nvidia-container-toolkit) and the kubelet and kube-controller-manager of the
# pinned k8s.io/kubernetes into _output/bin, the images, then runs
# test/e2enode, whose last line is the result.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
: "${VERSION:?}" "${IMAGE_REPO:?}"

if [ "$(id -u)" != 0 ]; then
  echo "make e2e-node must run as root: it installs packages, starts containerd and kubelets," >&2
  echo "creates device nodes and mounts in mount namespaces of its own. Run: sudo make e2e-node" >&2
  exit 1
fi

# One run at a time on a machine: the nodes' cgroup roots, pod address
# ranges and device paths are fixed.
exec 9>/run/qgpu-e2e-node.lock
if ! flock -w 900 9; then
  echo "e2e-node: another make e2e-node held /run/qgpu-e2e-node.lock for 15 minutes" >&2
  exit 1
fi

# Debian bookworm's versions, the ones this was measured with.
RUNC_VERSION=1.1.5+ds1-1+deb12u1
CNI_PLUGINS_VERSION=1.1.1+ds1-3+b5
if ! command -v runc >/dev/null || [ ! -x /usr/lib/cni/loopback ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "e2e-node: installing runc $RUNC_VERSION, containernetworking-plugins $CNI_PLUGINS_VERSION, iproute2 (apt-get)"
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq \
    "runc=$RUNC_VERSION" "containernetworking-plugins=$CNI_PLUGINS_VERSION" iproute2 util-linux >/dev/null
fi

mkdir -p _output/bin
echo "e2e-node: building containerd $(awk '/containerd\/containerd\/v2 v/{print $NF}' hack/tools/containerd/go.mod) (hack/tools/containerd)"
"$GO" -C hack/tools/containerd build -tags no_btrfs,no_devmapper,no_zfs -o "$PWD/_output/bin/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
echo "e2e-node: building NVIDIA's container toolkit $(awk '/NVIDIA\/nvidia-container-toolkit v/{print $NF}' hack/tools/nvidia-container-toolkit/go.mod) (hack/tools/nvidia-container-toolkit)"
"$GO" -C hack/tools/nvidia-container-toolkit build -o "$PWD/_output/bin/" \
  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime \
  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook \
  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk
echo "e2e-node: building kubelet and kube-controller-manager $("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)"
"$GO" build -o _output/bin/ k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager
make -s images e2e-binaries VERSION="$VERSION" IMAGE_REPO="$IMAGE_REPO"
cp bin/qgpu-e2e-cni _output/bin/qgpu-e2e-cni

# The lock stays with this shell: the e2e program and what it starts
# (containerd, shims) must not inherit its descriptor.
bin/qgpu-e2e-node --version "$VERSION" --repo "$IMAGE_REPO" ${E2E_NODE_FLAGS:-} 9>&-
