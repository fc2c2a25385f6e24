package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// listing is what the commands print: the cluster, the pods the agents
// show suspended, and the --node filter.
type listing struct {
	*view.Cluster
	suspended view.Suspensions
	node      string
}

func printNodes(w io.Writer, c *listing) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCARD\tMODEL\tHEALTH\tMEMORY(GiB)\tCORES\tGREEDY\tPODS\tHOLDERS")
	for _, n := range append(append([]view.Node(nil), c.Nodes...), c.Other...) {
		if c.node != "" && n.Name != c.node {
			continue
		}
		if n.Invalid != "" {
			fmt.Fprintf(tw, "%s\t-\t-\tno cards: %s\t\t\t\t\t\n", n.Name, n.Invalid)
			continue
		}
		suspended := c.suspended.OnCards(c.Cluster, n.Name)
		for _, card := range n.Cards {
			health := "ok"
			if !card.Healthy {
				health = "UNHEALTHY"
			}
			holders := strings.Join(n.Holders[card.Index], ",")
			if holders == "" {
				holders = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d/%d\t%d/100\t%d/100\t%d/%d%s\t%s\n",
				n.Name, card.Index, card.Model, health, card.UsedMemoryGiB, card.MemoryGiB,
				card.UsedCores, card.UsedGreedy, card.Pods(), card.MaxPods,
				classes(n.Mixed, card.General, card.Online, card.Offline, suspended[card.Index]), holders)
		}
	}
	return tw.Flush()
}

// classes shows which classes hold the card, e.g. " (on:1 off:2)", and how
// many of its offline pods are suspended for a busy online pod, e.g.
// " (on:1 off:2 suspended:2)".
func classes(mixed bool, general, online, offline, suspended int) string {
	switch {
	case suspended > 0:
		return fmt.Sprintf(" (on:%d off:%d suspended:%d)", online, offline, suspended)
	case online+offline > 0:
		return fmt.Sprintf(" (on:%d off:%d)", online, offline)
	case general > 0 || !mixed:
		return ""
	}
	return " (mixed)"
}

func printPods(w io.Writer, c *listing, namespace string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tCLASS\tNODE\tSLICES\tGRANTED\tPHASE\tSUSPENDED\tPROBLEM")
	now := time.Now()
	for _, p := range c.Pods {
		if (namespace != "" && p.Namespace != namespace) || (c.node != "" && p.Node != c.node) {
			continue
		}
		node, slices, granted := "-", "-", "-"
		if p.Node != "" {
			node = p.Node
		}
		if p.Assignment != nil {
			slices = p.Assignment.String()
		}
		if p.Grant != nil {
			granted = "yes"
		}
		problem := p.Problem
		if problem == "" {
			problem = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Class, node, slices, granted, p.Phase,
			suspendedFor(c.suspended, p, now), problem)
	}
	return tw.Flush()
}

// suspendedFor is "-", or "yes" with how long ago the agent froze the pod.
func suspendedFor(s view.Suspensions, p view.Pod, now time.Time) string {
	sus, ok := s[p.UID]
	switch {
	case !ok:
		return "-"
	case sus.Since.IsZero():
		return "yes"
	}
	d := now.Sub(sus.Since)
	if d < 0 {
		d = 0 // clock skew between the node and here
	}
	return fmt.Sprintf("yes (%s)", d.Round(100*time.Millisecond))
}

// printCheck prints the notes, the warnings, one line per violation and
// then "violations <n>", and returns n: the command exits non-zero when it
// is not 0. Warnings are not counted (view.Cluster.Warnings says why).
func printCheck(w io.Writer, c *view.Cluster) int {
	v := c.Check()
	for _, p := range c.Swapped() {
		fmt.Fprintf(w, "note: %s runs on a twin's card (identical requests admitted in the other order; card totals are right)\n", p)
	}
	for _, x := range c.Warnings() {
		fmt.Fprintf(w, "warning: %s (not counted: it may have changed after the pod was placed)\n", x)
	}
	for _, x := range v {
		fmt.Fprintln(w, x)
	}
	fmt.Fprintf(w, "violations %d\n", len(v))
	return len(v)
}
