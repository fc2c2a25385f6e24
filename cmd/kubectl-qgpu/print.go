package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

func printNodes(w io.Writer, c *view.Cluster) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCARD\tMODEL\tHEALTH\tMEMORY(GiB)\tCORES\tGREEDY\tPODS\tHOLDERS")
	for _, n := range c.Nodes {
		if n.Invalid != "" {
			fmt.Fprintf(tw, "%s\t-\t-\tno cards: %s\t\t\t\t\t\n", n.Name, n.Invalid)
			continue
		}
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
				card.UsedCores, card.UsedGreedy, card.Pods(), card.MaxPods, classes(n.Mixed, card.General, card.Online, card.Offline), holders)
		}
	}
	return tw.Flush()
}

// classes shows which classes hold the card, e.g. " (on:1 off:2)".
func classes(mixed bool, general, online, offline int) string {
	switch {
	case online+offline > 0:
		return fmt.Sprintf(" (on:%d off:%d)", online, offline)
	case general > 0 || !mixed:
		return ""
	}
	return " (mixed)"
}

func printPods(w io.Writer, c *view.Cluster, namespace string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tCLASS\tNODE\tSLICES\tGRANTED\tPHASE\tPROBLEM")
	for _, p := range c.Pods {
		if namespace != "" && p.Namespace != namespace {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Class, node, slices, granted, p.Phase, problem)
	}
	return tw.Flush()
}
