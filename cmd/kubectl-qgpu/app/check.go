package app

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// Exit statuses of check, as kubectl diff's: 0 clean, 1 violations found,
// 2 (or more) the check could not be made. A job alerting on 1 is not woken by
// an expired token.
const (
	ExitViolations  = 1
	ExitCheckFailed = 2
)

// ExitError is an error that exits with a status other than 1.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the status the program exits with after err: 0 for none,
// an ExitError's code, else 1.
func ExitCode(err error) int {
	var e *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return 1
}

// CheckReport is `kubectl qgpu check -o json|yaml`: what the text prints.
type CheckReport struct {
	metav1.TypeMeta `json:",inline"`
	// Violations are the broken invariants; check exits 1 when there is any.
	Violations []Finding `json:"violations"`
	// Warnings are about what may have changed after the pod was placed
	// (view.Cluster.Warnings); not counted.
	Warnings []Finding `json:"warnings"`
	// Swapped are the pods (namespace/name) running on a twin's card:
	// identical requests admitted in the other order, card totals right; not counted.
	Swapped []string `json:"swapped"`
}

// DeepCopyObject implements runtime.Object.
func (r *CheckReport) DeepCopyObject() runtime.Object {
	return &CheckReport{TypeMeta: r.TypeMeta, Violations: slices.Clone(r.Violations),
		Warnings: slices.Clone(r.Warnings), Swapped: slices.Clone(r.Swapped)}
}

// Finding is one violation or warning: the text's `<reason> <object>: <message>`.
type Finding struct {
	// Reason names the invariant, e.g. Oversubscribed, Unassigned, GrantMismatch.
	Reason string `json:"reason"`
	// Object is the node's card (<node>/card<i>), the pod (<namespace>/<name>) or the node.
	Object  string `json:"object"`
	Message string `json:"message"`
}

func newCheckCommand(o *options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Report every violated invariant (oversubscribed or unknown card, pod without assignment or given other than it asked, grant mismatch)",
		Long: "Report every violated invariant: one line each, then `violations <n>` (-o json|yaml: a CheckReport).\n" +
			"Exit status, as kubectl diff's: 0 no violation, 1 violations, 2 the check could not be made (bad flags, the API).\n" +
			"Needs to list nodes and pods in all namespaces.",
		Example: "  kubectl qgpu check\n  kubectl qgpu check -o json | jq -r '.violations[].object'",
		Args:    failedCheck(cobra.NoArgs),
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format. One of: (json, yaml). Default: one line per violation, then violations <n>.")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{ExitCheckFailed, err} })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		report, err := o.check(cmd, format)
		if err != nil {
			return &ExitError{ExitCheckFailed, err}
		}
		if n := len(report.Violations); n > 0 {
			// The report is the output: no "Error:" line after it.
			cmd.SilenceErrors = true
			return &ExitError{ExitViolations, fmt.Errorf("%d invariant(s) violated", n)}
		}
		return nil
	}
	return cmd
}

// failedCheck makes an argument error exit as a check not made.
func failedCheck(args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := args(cmd, a); err != nil {
			return &ExitError{ExitCheckFailed, err}
		}
		return nil
	}
}

// check reads the cluster and prints the report in format ("" for text).
func (o *options) check(cmd *cobra.Command, format string) (*CheckReport, error) {
	var p printers.ResourcePrinter
	if format != "" {
		jy, err := genericclioptions.NewJSONYamlPrintFlags().ToPrinter(format)
		if err != nil {
			return nil, fmt.Errorf("--output: invalid value %q: one of json, yaml", format)
		}
		p = printers.NewTypeSetter(Scheme).ToPrinter(jy)
	}
	r, err := o.readCluster(cmd)
	if err != nil {
		return nil, err
	}
	s, err := o.source()
	if err != nil {
		return nil, err
	}
	report := checkReport(r.view, r.claims, s.namespaces(cmd.Context()))
	if p == nil {
		printCheck(o.streams.Out, report)
		return report, nil
	}
	return report, p.PrintObj(report, o.streams.Out)
}

// checkReport is the cluster's violations (the claimed pods compared with
// claims too), warnings (not counted: view.Cluster.Warnings says why; and
// the namespaces of qGPU pods without Pod Security baseline, an
// administrator's setting rather than a card's invariant) and swapped pods.
func checkReport(c *view.Cluster, claims []resourceapi.ResourceClaim, namespaces []v1.Namespace) *CheckReport {
	violations := append(c.Check(), c.CheckClaims(claims)...)
	warnings := append(c.Warnings(), c.PodSecurityWarnings(namespaces)...)
	r := &CheckReport{TypeMeta: typeMeta("CheckReport"), Violations: findings(violations), Warnings: findings(warnings), Swapped: c.Swapped()}
	if r.Swapped == nil {
		r.Swapped = []string{}
	}
	return r
}

func findings(vs []view.Violation) []Finding {
	out := make([]Finding, 0, len(vs))
	for _, v := range vs {
		out = append(out, Finding{Reason: v.Kind, Object: v.Object, Message: v.Detail})
	}
	return out
}

// printCheck prints the notes, the warnings, one line per violation and
// then "violations <n>".
func printCheck(w io.Writer, r *CheckReport) {
	for _, p := range r.Swapped {
		fmt.Fprintf(w, "note: %s runs on a twin's card (identical requests admitted in the other order; card totals are right)\n", p)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "warning: %s %s: %s (not counted: it may have changed after the pod was placed)\n", x.Reason, x.Object, x.Message)
	}
	for _, x := range r.Violations {
		fmt.Fprintf(w, "%s %s: %s\n", x.Reason, x.Object, x.Message)
	}
	fmt.Fprintf(w, "violations %d\n", len(r.Violations))
}
