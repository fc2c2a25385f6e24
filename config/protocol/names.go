// Package protocol holds the names and the versioned wire types that the
// scheduler and the agent share: resource names, labels, annotation keys, the
// node inventory and the pod assignment. It imports nothing from
// k8s.io/kubernetes so that both binaries (and kubectl-qgpu) can use it cheaply.
package protocol

// Extended resources a pod asks for (docs/design.md#what-a-pod-asks-for). Requests equal limits.
const (
	// ResourceMemory is qGPU memory in GiB, an integer ≥ 1.
	ResourceMemory = "tke.cloud.tencent.com/qgpu-memory"
	// ResourceCore is percent of one card for general pods (1..99, or 100·k).
	ResourceCore = "tke.cloud.tencent.com/qgpu-core"
	// ResourceCoreGreedy is an offline pod's share (1..100) of what online pods leave idle.
	ResourceCoreGreedy = "tke.cloud.tencent.com/qgpu-core-greedy"
)

// Resources are the extended resources, in the order the agent serves them
// and a grant lists them, and the scheduler keeps a node's allocatable count
// of each (ledger.Node.Allocatable).
var Resources = [...]string{ResourceMemory, ResourceCore, ResourceCoreGreedy}

// Node labels.
const (
	LabelDeviceEnable   = "qgpu-device-enable"
	LabelMixedEnable    = "mixed-qgpu-enable"
	LabelValueEnable    = "enable"
	LabelSchedulePolicy = "tke.cloud.tencent.com/qgpu-schedule-policy"
	// LabelEnforcement picks the agent's enforcement backend on a node
	// (env, hami-core, mps); absent means the agent's --backend default.
	LabelEnforcement = "qgpu.io/enforcement"
)

// Pod annotations written by users.
const (
	AnnotationAppClass     = "tke.cloud.tencent.com/app-class"
	AnnotationUseGPUType   = "nvidia.com/use-gputype"
	AnnotationNoUseGPUType = "nvidia.com/nouse-gputype"
)

// Annotations written by the project's own components.
const (
	// AnnotationInventory is written by the agent on its Node.
	AnnotationInventory = "qgpu.io/inventory"
	// AnnotationAssignment is written by the scheduler in PreBind.
	AnnotationAssignment = "qgpu.io/assignment"
	// AnnotationGrant is written by the agent after Allocate: what it really handed out.
	AnnotationGrant = "qgpu.io/grant"
)

// SchedulerName is the schedulerName that pods use to reach qgpu-scheduler.
const SchedulerName = "qgpu-scheduler"

// GiB is the number of MiB in one GiB: inventory memory is MiB, requests are GiB.
const GiB = 1024

// CoresPerCard is the compute of one card in qgpu-core units.
const CoresPerCard = 100
