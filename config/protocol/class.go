package protocol

import (
	"fmt"
	"strings"
)

// Class is how a pod shares a card (docs/design.md#what-a-pod-asks-for).
type Class string

const (
	ClassGeneral Class = "general"
	ClassOnline  Class = "online"
	ClassOffline Class = "offline"
)

// ParseClass reads the app-class annotation; an absent annotation is general.
func ParseClass(value string, present bool) (Class, error) {
	if !present {
		return ClassGeneral, nil
	}
	switch Class(value) {
	case ClassOnline, ClassOffline:
		return Class(value), nil
	}
	return "", fmt.Errorf("annotation %s: unsupported value %q: must be %q or %q (or absent for general)",
		AnnotationAppClass, value, ClassOnline, ClassOffline)
}

// Policy is a node's isolation policy for the agent's backend, with the names
// of Tencent's qGPU on TKE
// (docs/design.md#what-a-pod-asks-for).
type Policy string

const (
	PolicyBestEffort Policy = "best-effort"
	PolicyFixedShare Policy = "fixed-share"
	PolicyBurstShare Policy = "burst-share"
)

// DefaultPolicy applies when the node has no policy label.
const DefaultPolicy = PolicyBestEffort

var policyShortForms = map[string]Policy{
	"be": PolicyBestEffort, "fs": PolicyFixedShare, "bs": PolicyBurstShare,
}

// ParsePolicy accepts the full names and the short forms, case-insensitively.
// An empty value is the default policy.
func ParsePolicy(value string) (Policy, error) {
	v := strings.ToLower(strings.TrimSpace(value))
	switch Policy(v) {
	case "":
		return DefaultPolicy, nil
	case PolicyBestEffort, PolicyFixedShare, PolicyBurstShare:
		return Policy(v), nil
	}
	if p, ok := policyShortForms[v]; ok {
		return p, nil
	}
	return DefaultPolicy, fmt.Errorf("label %s: unsupported value %q: must be one of best-effort (be), fixed-share (fs), burst-share (bs)",
		LabelSchedulePolicy, value)
}
