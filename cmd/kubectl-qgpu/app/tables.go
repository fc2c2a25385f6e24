package app

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Columns of priority 1 show with -o wide only, as in kubectl's own tables.
const wideOnly = 1

// nodeTable is the `nodes` table: one row per card. barWidth > 0 adds the
// cards' memory and cores fill as bars (--bars).
func nodeTable(l *NodeCardsList, barWidth int) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Node", Type: "string"}, {Name: "Card", Type: "string"}, {Name: "Model", Type: "string"},
		{Name: "Health", Type: "string"}, {Name: "Memory(GiB)", Type: "string"}, {Name: "Cores", Type: "string"},
		{Name: "Greedy", Type: "string"}, {Name: "Pods", Type: "string"},
	}}
	if barWidth > 0 {
		t.ColumnDefinitions = append(t.ColumnDefinitions,
			metav1.TableColumnDefinition{Name: "Memory%", Type: "string"}, metav1.TableColumnDefinition{Name: "Cores%", Type: "string"})
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions,
		metav1.TableColumnDefinition{Name: "Holders", Type: "string"},
		metav1.TableColumnDefinition{Name: "UUID", Type: "string", Priority: wideOnly})
	for _, n := range l.Items {
		if n.Invalid != "" && len(n.Cards) == 0 {
			row := []any{n.Name, "-", "-", "no cards: " + n.Invalid, "", "", "", ""}
			if barWidth > 0 {
				row = append(row, "", "")
			}
			t.Rows = append(t.Rows, metav1.TableRow{Cells: append(row, "", "")})
			continue
		}
		for _, c := range n.Cards {
			health := "ok"
			if !c.Healthy {
				health = "UNHEALTHY"
			}
			row := []any{n.Name, fmt.Sprint(c.Index), c.Model, health,
				fmt.Sprintf("%d/%d", c.UsedMemoryGiB, c.MemoryGiB), fmt.Sprintf("%d/100", c.UsedCores),
				fmt.Sprintf("%d/100", c.UsedCoreGreedy), fmt.Sprintf("%d/%d%s", c.Pods.General+c.Pods.Online+c.Pods.Offline, c.MaxPods, classes(n.Mixed, c.Pods))}
			if barWidth > 0 {
				// General pods hold qgpu-core, offline pods qgpu-core-greedy;
				// a card never holds both (classes do not share a card).
				row = append(row, bar(c.UsedMemoryGiB, c.MemoryGiB, barWidth), bar(c.UsedCores+c.UsedCoreGreedy, 100, barWidth))
			}
			t.Rows = append(t.Rows, metav1.TableRow{Cells: append(row, dash(strings.Join(c.Holders, ",")), c.UUID)})
		}
	}
	return t
}

// classes shows which classes hold the card, e.g. " (on:1 off:2)", and how
// many of its offline pods are suspended for a busy online pod, e.g.
// " (on:1 off:2 suspended:2)"; " (mixed)" for an empty card of a mixed node.
func classes(mixed bool, p PodCounts) string {
	switch {
	case p.Suspended > 0:
		return fmt.Sprintf(" (on:%d off:%d suspended:%d)", p.Online, p.Offline, p.Suspended)
	case p.Online+p.Offline > 0:
		return fmt.Sprintf(" (on:%d off:%d)", p.Online, p.Offline)
	case p.General > 0 || !mixed:
		return ""
	}
	return " (mixed)"
}

// podTable is the `pods` table. withNamespace adds the NAMESPACE column
// (-A, as kubectl does); models, the card model of each node/card, fills
// -o wide's MODEL column (nil: node info was not readable).
func podTable(l *PodSlicesList, withNamespace bool, models map[string]map[int]string, now time.Time) *metav1.Table {
	t := &metav1.Table{}
	if withNamespace {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: "Namespace", Type: "string"})
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions, []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"}, {Name: "Class", Type: "string"}, {Name: "Node", Type: "string"},
		{Name: "Slices", Type: "string", Description: "container:card=GiB/cores"}, {Name: "Granted", Type: "string"},
		{Name: "Phase", Type: "string"}, {Name: "Suspended", Type: "string"}, {Name: "Problem", Type: "string"},
		{Name: "Model", Type: "string", Priority: wideOnly}, {Name: "Granted-Slices", Type: "string", Priority: wideOnly},
	}...)
	for _, p := range l.Items {
		var row []any
		if withNamespace {
			row = append(row, p.Namespace)
		}
		granted := "-"
		if p.Granted != nil {
			granted = "yes"
		}
		row = append(row, p.Name, p.Class, dash(p.NodeName), dash(slicesString(p.Assigned)), granted, p.Phase,
			suspendedFor(p.SuspendedSince, now), dash(p.Problem), cardModels(p, models), dash(slicesString(p.Granted)))
		t.Rows = append(t.Rows, metav1.TableRow{Cells: row})
	}
	return t
}

// slicesString is a pod's slices in one word per container:
// `name:card=GiB/cores,card=GiB/cores`.
func slicesString(cs []ContainerSlices) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:", c.Name)
		for j, s := range c.Slices {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d=%dG/%d", s.Card, s.MemoryGiB, s.Cores)
		}
	}
	return b.String()
}

// cardModels names the models of the cards the pod is assigned, "-" when
// it has none or node info was not readable.
func cardModels(p PodSlices, models map[string]map[int]string) string {
	byCard := models[p.NodeName]
	if byCard == nil {
		return "-"
	}
	var out []string
	for _, c := range p.Assigned {
		for _, s := range c.Slices {
			if m := byCard[s.Card]; m != "" && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return dash(strings.Join(out, ","))
}

// suspendedFor is "-", or "yes" with how long ago the agent froze the pod.
func suspendedFor(since *metav1.Time, now time.Time) string {
	switch {
	case since == nil:
		return "-"
	case since.IsZero():
		return "yes"
	}
	d := now.Sub(since.Time)
	if d < 0 {
		d = 0 // clock skew between the node and here
	}
	return fmt.Sprintf("yes (%s)", d.Round(100*time.Millisecond))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
