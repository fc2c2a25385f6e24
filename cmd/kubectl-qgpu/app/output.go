package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// output is a command's -o flag: the table ("" or wide), or one of
// cli-runtime's printers (json, yaml, jsonpath, go-template and their
// -file forms) over the typed lists of types.go.
type output struct {
	flags *genericclioptions.PrintFlags
}

func addOutputFlags(cmd *cobra.Command) *output {
	o := &output{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(Scheme)}
	o.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s).", strings.Join(o.formats(), ", "))
	return o
}

// formats are the -o values accepted: the printers' but name, which prints
// object names of a list whose items are no API objects.
func (o *output) formats() []string {
	out := []string{"wide"}
	for _, f := range o.flags.AllowedFormats() {
		if f != "name" {
			out = append(out, f)
		}
	}
	return out
}

func (o *output) format() string { return *o.flags.OutputFormat }

// table reports whether the table is printed: no -o (and no --template,
// which alone means go-template, as in kubectl), or -o wide.
func (o *output) table() bool {
	if t := o.flags.TemplatePrinterFlags.TemplateArgument; o.format() == "" && t != nil && *t != "" {
		return false
	}
	return o.format() == "" || o.format() == "wide"
}

func (o *output) wide() bool { return o.format() == "wide" }

// validate fails on an unknown -o before anything is read from the cluster.
func (o *output) validate() error {
	if o.table() {
		return nil
	}
	if o.format() == "name" {
		return fmt.Errorf("--output: invalid value %q: one of %s", o.format(), strings.Join(o.formats(), ", "))
	}
	if _, err := o.flags.ToPrinter(); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	return nil
}

// print prints obj with the printer -o names, or the table for it.
func (o *output) print(w io.Writer, obj runtime.Object, table func() runtime.Object) error {
	if o.table() {
		return printers.NewTablePrinter(printers.PrintOptions{Wide: o.wide()}).PrintObj(table(), w)
	}
	p, err := o.flags.ToPrinter()
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	return p.PrintObj(obj, w)
}
