package v1

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
)

// Registered on kube-scheduler's v1 builder, from which its plugin-args
// conversion scheme is built lazily. kube-scheduler's scheme was built from the builders before this package's
// init ran, so add the args types to it again (as scheduler-plugins does).
func init() {
	schedv1.SchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, addConversionFuncs)
	utilruntime.Must(schedconfig.AddToScheme(kubeschedulerscheme.Scheme))
	utilruntime.Must(schedv1.AddToScheme(kubeschedulerscheme.Scheme))
}
