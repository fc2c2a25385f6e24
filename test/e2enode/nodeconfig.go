package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The configuration files of a node's containerd, CNI plugin and kubelet.

func containerdConfig(dir string, env nodeEnv, mode runtimeMode) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q

[plugins."io.containerd.cri.v1.runtime"]
  # These machines lack CAP_SYS_RESOURCE: a negative oom_score_adj cannot be
  # written, and without this every sandbox fails to start.
  restrict_oom_score_adj = true
  # The node's NVIDIA specs and the agent's own.
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
%[7]s  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni", %[5]q]
    conf_dir = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"),
		filepath.Join(dir, "containerd.sock"), env.pauseImage, env.binDir, filepath.Join(dir, "cni"), nvidiaRuntimeConfig(mode))
}

func cniConfig(dir, prefix string, env nodeEnv) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "qgpu-e2e", "plugins": [{"type": "qgpu-e2e-cni",
  "prefix": %q, "dataDir": %q, "proxySocket": %q, "serviceIP": %q}]}
`, prefix, filepath.Join(dir, "cni-data"), env.proxySocket, env.serviceIP)
}

func kubeletConfig(dir string, ports [2]int, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
resolvConf: ""
rotateCertificates: false
`, ports[0], ports[1], cgroupRoot, filepath.Join(dir, "containerd.sock"))
}

// socketKey matches the socket paths of `containerd config dump`: the
// sections' address and the plugins' socket_path keys.
var socketKey = regexp.MustCompile(`(?m)^\s*(address|socket_path)\s*=\s*'([^']+)'`)

// checkPrivateSockets runs `containerd config dump` on the node's
// configuration and fails on a socket path that every node would share:
// one neither under dir nor under a mount of the node's own (privateBinds,
// nodeTmpfs). Two containerds listening on one path race at start.
func checkPrivateSockets(containerd, dir string) error {
	out, err := exec.Command(containerd, "--config", filepath.Join(dir, "containerd.toml"), "config", "dump").Output()
	if err != nil {
		return fmt.Errorf("containerd config dump: %w", err)
	}
	return privateSockets(string(out), dir)
}

// privateSockets is checkPrivateSockets on a dump's text.
func privateSockets(dump, dir string) error {
	private := []string{dir}
	for _, b := range privateBinds() {
		private = append(private, b[1])
	}
	private = append(private, nodeTmpfs...)
	for _, m := range socketKey.FindAllStringSubmatch(dump, -1) {
		path := filepath.Clean(m[2])
		if rest, ok := strings.CutPrefix(path, "/var/run/"); ok { // a link to /run
			path = "/run/" + rest
		}
		if !slices.ContainsFunc(private, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") }) {
			return fmt.Errorf("containerd's %s %s is the same path on every node: give it a path under %s or a mount of the node's own", m[1], m[2], dir)
		}
	}
	return nil
}
