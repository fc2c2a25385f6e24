package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
)

// NVIDIA's container toolkit on the e2e nodes, built from its pinned Go
// module (hack/tools/nvidia-container-toolkit) and installed as GPU
// Operator's toolkit container installs it (docs/real-node.md): the
// binaries and their config under /usr/local/nvidia/toolkit, the runtime
// behind a wrapper naming its config file, the management spec
// (management.nvidia.com/gpu=all) in /var/run/cdi, and a driver root with
// the driver's files under FakeDriverRoot.

// FakeDriverRoot is each node's driver root, in its own mount namespace:
// dev/ with the fake cards' device nodes, the driver's libraries (not ELF:
// nothing here loads them) and nvidia-smi.
const FakeDriverRoot = "/run/qgpu-e2e/driver"

// ToolkitDir is where GPU Operator's toolkit container installs the toolkit.
const ToolkitDir = "/usr/local/nvidia/toolkit"

// FakeDriverVersion is the fake driver's version, the one the agent's fake
// NVML reports: nvcdi looks for libcuda.so.<version> under the driver root.
const FakeDriverVersion = fakespec.DriverVersion

// runtimeMode is how a node's containerd runs containers. GPU Operator's
// current release (CDI on, its default) leaves runc the default and adds
// NVIDIA's runtime as handler nvidia (RuntimeClass nvidia) in cdi mode,
// accepting NVIDIA_VISIBLE_DEVICES from unprivileged containers (the
// toolkit's default). The other mode an operator meets is NVIDIA's
// runtime as containerd's default (GPU Operator with CDI off or
// NVIDIA_RUNTIME_SET_AS_DEFAULT=true, or a hand-installed toolkit); there
// qGPU needs accept-nvidia-visible-devices-envvar-when-unprivileged=false
// (docs/install.md), else every pod's NVIDIA_VISIBLE_DEVICES=all takes
// every card.
type runtimeMode struct {
	nvidiaDefault bool
	acceptEnvvar  bool
}

func (m runtimeMode) String() string {
	if m.nvidiaDefault {
		return fmt.Sprintf("NVIDIA's runtime as default (accept envvar unprivileged %v)", m.acceptEnvvar)
	}
	return fmt.Sprintf("runc default, NVIDIA's runtime as RuntimeClass nvidia (accept envvar unprivileged %v)", m.acceptEnvvar)
}

// toolkitBinaries are the toolkit's programs make e2e-node builds into
// the bin directory.
var toolkitBinaries = []string{"nvidia-container-runtime", "nvidia-cdi-hook", "nvidia-ctk"}

// writeDriverRoot creates the node's fake driver root under dir/driver.
func writeDriverRoot(dir string, cards int) error {
	root := filepath.Join(dir, "driver")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	if err := makeDevices(filepath.Join(root, "dev"), cards); err != nil {
		return err
	}
	files := map[string]string{"usr/bin/nvidia-smi": "#!/bin/sh\necho 'e2e-node: fake nvidia-smi'\n"}
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} {
		files["usr/lib/x86_64-linux-gnu/"+lib+"."+FakeDriverVersion] = "not ELF: e2e-node\n"
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// installToolkit lays the toolkit out under dir/toolkit as GPU Operator's
// installer does (cmd/nvidia-ctk-installer: the binaries, a wrapper that
// points the runtime at its config with NVIDIA_CTK_CONFIG_FILE_PATH, the
// config written with nvidia-ctk config). The installer's wrapper also
// runs runc directly while /proc/modules has no nvidia module; these
// nodes have no driver module, so that check is left out.
func installToolkit(dir, binDir string, mode runtimeMode) error {
	tk := filepath.Join(dir, "toolkit")
	cfgDir := filepath.Join(tk, ".config", "nvidia-container-runtime")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	for _, b := range toolkitBinaries {
		link := filepath.Join(tk, b+".real")
		if b == "nvidia-cdi-hook" || b == "nvidia-ctk" {
			link = filepath.Join(tk, b)
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(binDir, b), link); err != nil {
			return err
		}
	}
	cfgInNode := filepath.Join(ToolkitDir, ".config", "nvidia-container-runtime", "config.toml")
	wrapper := fmt.Sprintf("#! /bin/sh\n# As GPU Operator's toolkit installer writes it, less its driver module check.\nNVIDIA_CTK_CONFIG_FILE_PATH=%s \\\n  exec %s \"$@\"\n",
		cfgInNode, filepath.Join(ToolkitDir, "nvidia-container-runtime.real"))
	if err := os.WriteFile(filepath.Join(tk, "nvidia-container-runtime"), []byte(wrapper), 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(cfgDir, "config.toml")
	ctk := filepath.Join(binDir, "nvidia-ctk")
	if out, err := exec.Command(ctk, "config", "default", "--output", cfg).CombinedOutput(); err != nil {
		return fmt.Errorf("nvidia-ctk config default: %v: %s", err, out)
	}
	sets := []string{
		"nvidia-container-runtime.mode=cdi",
		"nvidia-container-runtime.modes.cdi.default-kind=management.nvidia.com/gpu",
		"nvidia-container-runtime.runtimes=runc",
		"nvidia-container-runtime.debug=" + filepath.Join(dir, "nvidia-container-runtime.log"),
		"nvidia-ctk.path=" + filepath.Join(ToolkitDir, "nvidia-ctk"),
		"accept-nvidia-visible-devices-envvar-when-unprivileged=" + strconv.FormatBool(mode.acceptEnvvar),
	}
	args := []string{"config", "--config-file", cfg, "--in-place"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	if out, err := exec.Command(ctk, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("nvidia-ctk config --set: %v: %s", err, out)
	}
	return nil
}

// generateManagementSpec runs, inside the node's mount namespace, what
// GPU Operator's toolkit container runs at its start: nvidia-ctk's
// management spec of the driver root, into /var/run/cdi.
func generateManagementSpec(binDir string) error {
	out, err := exec.Command(filepath.Join(binDir, "nvidia-ctk"), "cdi", "generate", "--mode=management",
		"--vendor=management.nvidia.com", "--class=gpu",
		"--driver-root="+FakeDriverRoot, "--dev-root="+FakeDriverRoot,
		"--nvidia-cdi-hook-path="+filepath.Join(ToolkitDir, "nvidia-cdi-hook"),
		"--output=/var/run/cdi/management.nvidia.com-gpu.yaml").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nvidia-ctk cdi generate --mode=management: %v: %s", err, out)
	}
	return nil
}

// nvidiaRuntimeConfig is the containerd configuration of the nvidia
// handler, as nvidia-ctk-installer writes it (runc's options with
// BinaryName the toolkit's runtime), and containerd's default runtime.
func nvidiaRuntimeConfig(mode runtimeMode) string {
	def, podAnnotations := "runc", ""
	if mode.nvidiaDefault {
		// As a node set up for CDI requests by annotation passes them: the
		// tenant suite's control shows what qgpu-device-requests refuses.
		def, podAnnotations = "nvidia", `      pod_annotations = ["cdi.k8s.io/*"]
`
	}
	return fmt.Sprintf(`  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = %q
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
%s      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
        BinaryName = %q
`, def, podAnnotations, filepath.Join(ToolkitDir, "nvidia-container-runtime"))
}

// nvidiaRuntimeRan reports whether NVIDIA's runtime handled a container
// on the node (its debug log names the mode it resolved).
func nvidiaRuntimeRan(dir string) bool {
	raw, err := os.ReadFile(filepath.Join(dir, "nvidia-container-runtime.log"))
	return err == nil && strings.Contains(string(raw), "Using requested mode 'cdi'")
}
