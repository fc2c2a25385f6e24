package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// output is a table command's printing flags, kubectl get's: -o (the
// table, "" or wide, or one of cli-runtime's printers: name, json, yaml,
// jsonpath, go-template and their -file forms, over the typed lists of
// types.go), --no-headers and --sort-by.
type output struct {
	flags     *genericclioptions.PrintFlags
	noHeaders bool
	sortBy    string
}

// list is what a table command prints: a typed list that --sort-by
// orders and whose items -o name names.
type list interface {
	runtime.Object
	// sortBy orders the items by a kubectl --sort-by field spec.
	sortBy(field string) error
	// refs are the kind (core group) and names of the API objects the
	// items stand for, for -o name.
	refs() (kind string, names []string)
}

// addOutputFlags adds the printing flags; sortBy says, for --help, what
// the items of the command's list are.
func addOutputFlags(cmd *cobra.Command, sortBy string) *output {
	o := &output{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(Scheme)}
	o.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s).", strings.Join(o.formats(), ", "))
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "When using the default output format or wide, don't print headers.")
	cmd.Flags().StringVar(&o.sortBy, "sort-by", "",
		"If non-empty, sort "+sortBy+" by this field specification, a JSONPath expression over the items of -o json (e.g. '{.metadata.name}'), as kubectl get's. "+
			"The field must be a number, a string or a boolean; items without it come first.")
	return o
}

// formats are the -o values accepted: the table's and the printers'.
func (o *output) formats() []string {
	return append([]string{"wide"}, o.flags.AllowedFormats()...)
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

// validate fails on an unknown -o or a bad --sort-by before anything is
// read from the cluster.
func (o *output) validate() error {
	if _, err := parseSortBy(o.sortBy); err != nil {
		return err
	}
	if o.table() {
		return nil
	}
	if _, err := o.flags.ToPrinter(); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	return nil
}

// print sorts l by --sort-by and prints it with the printer -o names, or
// as the table for it (table is called after sorting).
func (o *output) print(w io.Writer, l list, table func() runtime.Object) error {
	if err := l.sortBy(o.sortBy); err != nil {
		return err
	}
	if o.table() {
		return printers.NewTablePrinter(printers.PrintOptions{Wide: o.wide(), NoHeaders: o.noHeaders}).PrintObj(table(), w)
	}
	p, err := o.flags.ToPrinter()
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	var obj runtime.Object = l
	if o.format() == "name" {
		obj = references(l)
	}
	return p.PrintObj(obj, w)
}

// references is the list of the API objects l's items stand for: the
// name printer prints kind/name of each, as kubectl get -o name does.
func references(l list) *unstructured.UnstructuredList {
	kind, names := l.refs()
	out := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, n := range names {
		out.Items = append(out.Items, unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": n}}})
	}
	return out
}
