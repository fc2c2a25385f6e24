package app

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/config/args"
	argsv1 "github.com/qgpu-scheduler/qgpu/config/args/v1"
)

// DefaultSchedulerConfig names the scheduler's configuration as
// manifests/scheduler ships it: the ConfigMap is generated with a hash
// suffix (qgpu-scheduler-config-<hash>), so with this default the one the
// scheduler's Deployment mounts is read (schedulerConfigMapName); the
// name itself is read only where that cannot be found (installs of
// before). Any other value is read as written.
const (
	DefaultSchedulerConfig = "qgpu-system/qgpu-scheduler-config"
	schedulerConfigKey     = "config.yaml"
	pluginName             = "QGPU"
	// schedulerDeployment is the Deployment of manifests/scheduler, in the
	// namespace of DefaultSchedulerConfig.
	schedulerDeployment = "qgpu-scheduler"
)

// parseMaxPodsPerCard reads QGPU's maxPodsPerCard from a
// KubeSchedulerConfiguration (kube-scheduler's own v1 type, the plugin's
// args decoded strictly as the plugin's versioned QGPUArgs, so a misspelt
// field is an error here as it is for the scheduler): 0 (the rule
// memory/4) where no profile sets it. Every profile that enables QGPU
// shares one ledger and must set the same value (the scheduler refuses to
// start otherwise), so two different values are an error, as is a value
// the plugin's validation refuses.
func parseMaxPodsPerCard(data []byte) (int, error) {
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return 0, fmt.Errorf("parsing the scheduler configuration: %w", err)
	}
	found, value := "", int32(0)
	for i, p := range cfg.Profiles {
		for j, pc := range p.PluginConfig {
			if pc.Name != pluginName || len(pc.Args.Raw) == 0 {
				continue
			}
			path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
			var a argsv1.QGPUArgs
			if err := yaml.UnmarshalStrict(pc.Args.Raw, &a); err != nil {
				return 0, fmt.Errorf("parsing the scheduler configuration: %s: %w", path, err)
			}
			if a.MaxPodsPerCard == nil {
				continue
			}
			v := *a.MaxPodsPerCard
			argsv1.SetDefaults_QGPUArgs(&a)
			var in args.QGPUArgs
			if err := argsv1.Convert_v1_QGPUArgs_To_args_QGPUArgs(&a, &in, nil); err != nil {
				return 0, fmt.Errorf("%s: %w", path, err)
			}
			if errs := args.Validate(path, &in); len(errs) > 0 {
				return 0, errs.ToAggregate()
			}
			if found != "" && v != value {
				return 0, fmt.Errorf("%s: invalid value %d: %s is %d, and every profile must agree", path.Child("maxPodsPerCard"), v, found, value)
			}
			found, value = path.Child("maxPodsPerCard").String(), v
		}
	}
	return int(value), nil
}

// maxPodsPerCard reads the limit from the scheduler's ConfigMap (ref is
// namespace/name). A user who may not read it, or a cluster without it,
// gets the default rule (0) and a warning saying so.
func (s *source) maxPodsPerCard(ctx context.Context, ref string) (int, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return 0, fmt.Errorf("--scheduler-config: invalid value %q: want namespace/name", ref)
	}
	if ref == DefaultSchedulerConfig {
		if mounted := s.schedulerConfigMapName(ctx, ns, name); mounted != "" {
			name, ref = mounted, ns+"/"+mounted
		}
	}
	cm, err := s.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		s.warn("pods per card: the default rule (card GiB / 4): reading ConfigMap %s: %v", ref, err)
		return 0, nil
	}
	data, ok := cm.Data[schedulerConfigKey]
	if !ok {
		return 0, fmt.Errorf("ConfigMap %s has no key %s", ref, schedulerConfigKey)
	}
	n, err := parseMaxPodsPerCard([]byte(data))
	if err != nil {
		return 0, fmt.Errorf("ConfigMap %s: %w", ref, err)
	}
	return n, nil
}

// schedulerConfigMapName is the ConfigMap of the scheduler Deployment's
// volumes whose name is prefix or prefix-<hash>: the configuration the
// running scheduler reads. "" when the Deployment cannot be read (a user
// without the right: the caller then reads prefix itself) or mounts none.
func (s *source) schedulerConfigMapName(ctx context.Context, ns, prefix string) string {
	d, err := s.client.AppsV1().Deployments(ns).Get(ctx, schedulerDeployment, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if cm := v.ConfigMap; cm != nil && (cm.Name == prefix || strings.HasPrefix(cm.Name, prefix+"-")) {
			return cm.Name
		}
	}
	return ""
}
