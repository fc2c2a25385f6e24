package inventory

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

var metaPatchOptions = metav1.PatchOptions{FieldManager: "qgpu-agent"}
