package agent

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// TestValidateDRA: the DRA mode's flags are checked before anything
// starts, each error naming its flag and value.
func TestValidateDRA(t *testing.T) {
	base := func() Config {
		return Config{NodeName: "n", Client: fake.NewClientset(), NVML: nvml.NewFake(nil, "n", ""), Backend: "env",
			DBFile: "/tmp/db", DevicePluginDir: "/dp", HealthInterval: 1, ReconcileInterval: 1,
			KubeletPluginsDir: "/var/lib/kubelet/plugins", KubeletRegistryDir: "/var/lib/kubelet/plugins_registry", CDISpecDir: "/var/run/cdi"}
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"device plugins by default", func(*Config) {}, ""},
		{"device plugins named", func(c *Config) { c.KubeletAPI = KubeletAPIDevicePlugins }, ""},
		{"dra", func(c *Config) { c.KubeletAPI = KubeletAPIDRA }, ""},
		{"unknown API", func(c *Config) { c.KubeletAPI = "csi" }, `--kubelet-api "csi": must be device-plugins or dra`},
		{"relative plugins dir", func(c *Config) { c.KubeletAPI = KubeletAPIDRA; c.KubeletPluginsDir = "plugins" }, `--kubelet-plugins-dir "plugins": must be an absolute path`},
		{"no CDI spec dir", func(c *Config) { c.KubeletAPI = KubeletAPIDRA; c.CDISpecDir = "" }, `--cdi-spec-dir "": must be an absolute path`},
		{"relative dirs ignored without DRA", func(c *Config) { c.KubeletRegistryDir = "x" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	c := base()
	if got := c.checkpointPath(); got != "/var/lib/kubelet/plugins/gpu.qgpu.io/checkpoint.json" {
		t.Errorf("default checkpoint %q", got)
	}
}
