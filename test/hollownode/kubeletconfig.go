package main

import (
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// kubeletConfig is kubemark's GetHollowKubeletConfig with every path under
// the node's root dir. It is a copy rather than a call because kubemark's
// makes its directories under a hard-coded /tmp. The kubelet's HTTP servers
// stay off: several nodes share the host's network namespace and would
// fight over port 10250.
func kubeletConfig(o *options) (*kubeletoptions.KubeletFlags, *kubeletconfig.KubeletConfiguration, error) {
	f := kubeletoptions.NewKubeletFlags()
	f.RootDirectory = filepath.Join(o.rootDir, "kubelet")
	f.HostnameOverride = o.nodeName
	f.MinimumGCAge = metav1.Duration{Duration: time.Minute}
	f.MaxContainerCount = 100
	f.MaxPerPodContainerCount = 2
	f.NodeLabels = o.nodeLabels

	c, err := kubeletoptions.NewKubeletConfiguration()
	if err != nil {
		return nil, nil, fmt.Errorf("defaulting kubelet configuration: %w", err)
	}
	c.StaticPodURL = ""
	c.StaticPodPath = filepath.Join(o.rootDir, "static-pods")
	c.PodLogsDir = filepath.Join(o.rootDir, "pod-logs")
	c.EnableServer = false
	c.ReadOnlyPort = 0
	c.FileCheckFrequency.Duration = 20 * time.Second
	c.HTTPCheckFrequency.Duration = 20 * time.Second
	c.NodeStatusUpdateFrequency.Duration = o.statusPeriod
	c.NodeStatusReportFrequency.Duration = 5 * time.Minute
	c.NodeLeaseDurationSeconds = int32(o.leaseSeconds)
	c.SyncFrequency.Duration = 10 * time.Second
	c.EvictionPressureTransitionPeriod.Duration = 5 * time.Minute
	c.MaxPods = int32(o.pods)
	c.PodsPerCore = 0
	c.ClusterDNS = []string{}
	c.ImageGCHighThresholdPercent = 90
	c.ImageGCLowThresholdPercent = 80
	c.ProviderID = "kubemark://" + o.nodeName
	c.VolumeStatsAggPeriod.Duration = time.Minute
	c.CgroupRoot = ""
	c.CPUCFSQuota = true
	c.EnableControllerAttachDetach = false
	c.EnableDebuggingHandlers = true
	c.CgroupsPerQOS = false
	c.HairpinMode = kubeletconfig.HairpinVeth
	c.MaxOpenFiles = 1024
	c.RegistryBurst = 10
	c.RegistryPullQPS = 5.0
	c.ResolverConfig = kubetypes.ResolvConfDefault
	c.KubeletCgroups = "/kubelet"
	c.SerializeImagePulls = true
	c.SystemCgroups = ""
	c.ProtectKernelDefaults = false
	c.RegisterNode = true
	c.LocalStorageCapacityIsolation = true
	return f, c, nil
}
