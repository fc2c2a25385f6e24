package app

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
)

// QuotaUsageList is `kubectl qgpu quota -o json|yaml`.
type QuotaUsageList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []QuotaUsage `json:"items"`
}

// QuotaUsage is one namespace's limit on one model and what it holds
// against it, or a namespace whose entry is invalid.
type QuotaUsage struct {
	Namespace string `json:"namespace"`
	// Model is the limit's key ("*": every model); empty when Invalid.
	Model string `json:"model,omitempty"`
	// Cores are whole-card equivalents in qgpu-core units (100 = one
	// card); CoresLimit is absent when the limit sets no cards.
	CoresUsed  int64  `json:"coresUsed"`
	CoresLimit *int64 `json:"coresLimit,omitempty"`
	// MemoryGiBLimit is absent when the limit sets no memory.
	MemoryGiBUsed  int64  `json:"memoryGiBUsed"`
	MemoryGiBLimit *int64 `json:"memoryGiBLimit,omitempty"`
	// Invalid is why the namespace's entry was refused; the scheduler keeps
	// its last valid limits, which this command cannot know, or closes the
	// namespace when it knows none (docs/quota.md).
	Invalid string `json:"invalid,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (l *QuotaUsageList) DeepCopyObject() runtime.Object {
	out := &QuotaUsageList{TypeMeta: l.TypeMeta, Items: append([]QuotaUsage(nil), l.Items...)}
	for i, q := range out.Items {
		out.Items[i].CoresLimit, out.Items[i].MemoryGiBLimit = copyInt(q.CoresLimit), copyInt(q.MemoryGiBLimit)
	}
	return out
}

func copyInt(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func newQuotaCommand(o *options) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Per-namespace qGPU quota by GPU model: use against limits",
		Long: "Per-namespace qGPU quota by GPU model (ConfigMap " + quota.ConfigMapName + " in the scheduler's namespace: that of\n" +
			"--scheduler-config, " + quota.ConfigMapNamespace + " by default):\n" +
			"what each namespace holds of each limited model against its limit, counted as the scheduler counts it\n" +
			"(assigned slices of bound pods that have not ended). Reads the ConfigMap, the nodes (card models) and the pods\n" +
			"of the namespace (-n, or the context's; -A: every namespace).",
		Example: "  kubectl qgpu quota -n team-a\n  kubectl qgpu quota -A -o yaml",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlags(cmd, "the rows (one per namespace and model)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "show every namespace's limits")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := out.validate(); err != nil {
			return err
		}
		s, ns, err := o.scope(all)
		if err != nil {
			return err
		}
		system, _, ok := strings.Cut(o.schedulerConfig, "/")
		if !ok || system == "" {
			return fmt.Errorf("--scheduler-config: invalid value %q: want namespace/name", o.schedulerConfig)
		}
		list, err := s.quotaUsage(cmd.Context(), ns, system)
		if err != nil {
			return err
		}
		if out.table() && len(list.Items) == 0 {
			fmt.Fprintln(o.streams.ErrOut, "No qGPU quota found.")
			return nil
		}
		return out.print(o.streams.Out, list, func() runtime.Object { return quotaTable(list) })
	}
	return cmd
}

// quotaUsage reads the limits from the qgpu-quota ConfigMap of the
// scheduler's namespace (system) and counts the namespace's holdings
// (every namespace when ns is "").
func (s *source) quotaUsage(ctx context.Context, ns, system string) (*QuotaUsageList, error) {
	cm, err := s.client.CoreV1().ConfigMaps(system).Get(ctx, quota.ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return nil, explain(err, "reading ConfigMap "+system+"/"+quota.ConfigMapName)
	}
	specs, errs := quota.ParseConfigMap(cm)
	if ns != "" {
		specs, errs = map[string]quota.Spec{ns: specs[ns]}, map[string]error{ns: errs[ns]}
		if errs[ns] == nil {
			delete(errs, ns)
		}
		if specs[ns] == nil {
			delete(specs, ns)
		}
	}
	tally := quota.NewTally()
	tally.SetConfigMap(specs, errs)
	if len(specs) > 0 {
		nodes, err := s.nodes(ctx, "")
		if err != nil {
			return nil, err
		}
		pods, err := s.pods(ctx, ns, "")
		if err != nil {
			return nil, err
		}
		holdAll(tally, view.Build(nodes, pods, 0))
	}
	return quotaList(tally), nil
}

// holdAll counts the assigned slices of every bound pod that has not ended,
// with the model of the card each sits on.
func holdAll(t *quota.Tally, c *view.Cluster) {
	models := map[string]map[string]string{} // node → card UUID → model
	for _, n := range append(append([]view.Node(nil), c.Nodes...), c.Other...) {
		models[n.Name] = map[string]string{}
		for _, card := range n.Cards {
			models[n.Name][card.UUID] = card.Model
		}
	}
	for _, p := range c.Pods {
		if p.Assignment == nil || p.Node == "" || p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed {
			continue
		}
		var uses []quota.SliceUse
		for _, ctr := range p.Assignment.Containers {
			var ms []string
			for _, sl := range ctr.Slices {
				ms = append(ms, models[p.Node][sl.UUID])
			}
			uses = append(uses, quota.HoldingUse(p.Assignment.Class, ctr.Slices, ms)...)
		}
		t.Held(p.UID, p.Namespace, uses)
	}
}

func quotaList(t *quota.Tally) *QuotaUsageList {
	out := &QuotaUsageList{TypeMeta: typeMeta("QuotaUsageList"), Items: []QuotaUsage{}}
	rows, invalid := t.Rows()
	for _, r := range rows {
		q := QuotaUsage{Namespace: r.Namespace, Model: r.Limit.Model, CoresUsed: r.Used.Cores, MemoryGiBUsed: r.Used.MemoryGiB}
		if r.Limit.Cores != quota.Unlimited {
			q.CoresLimit = copyInt(&r.Limit.Cores)
		}
		if r.Limit.MemoryGiB != quota.Unlimited {
			q.MemoryGiBLimit = copyInt(&r.Limit.MemoryGiB)
		}
		out.Items = append(out.Items, q)
	}
	for ns, err := range invalid {
		out.Items = append(out.Items, QuotaUsage{Namespace: ns, Invalid: err.Error()})
	}
	sort.SliceStable(out.Items, func(i, j int) bool { return out.Items[i].Namespace < out.Items[j].Namespace })
	return out
}

// quotaTable is the `quota` table: one row per namespace and model.
func quotaTable(l *QuotaUsageList) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Namespace", Type: "string"}, {Name: "Model", Type: "string"},
		{Name: "Cards", Type: "string"}, {Name: "Memory(GiB)", Type: "string"}, {Name: "Status", Type: "string"},
	}}
	for _, q := range l.Items {
		if q.Invalid != "" {
			t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{q.Namespace, "-", "-", "-", "INVALID (scheduler keeps the last valid limits, or closes the namespace): " + q.Invalid}})
			continue
		}
		cards, mem := quota.FormatCards(q.CoresUsed)+"/-", fmt.Sprintf("%d/-", q.MemoryGiBUsed)
		if q.CoresLimit != nil {
			cards = quota.FormatCards(q.CoresUsed) + "/" + quota.FormatCards(*q.CoresLimit)
		}
		if q.MemoryGiBLimit != nil {
			mem = fmt.Sprintf("%d/%d", q.MemoryGiBUsed, *q.MemoryGiBLimit)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{q.Namespace, q.Model, cards, mem, quotaStatus(q)}})
	}
	return t
}

// quotaStatus says whether the namespace can take more of the model:
// "over" when it holds more than a limit (a limit lowered under pods that
// run), "full" at a limit, else "ok".
func quotaStatus(q QuotaUsage) string {
	status := "ok"
	for _, d := range [][2]int64{{q.CoresUsed, limitOr(q.CoresLimit)}, {q.MemoryGiBUsed, limitOr(q.MemoryGiBLimit)}} {
		switch used, limit := d[0], d[1]; {
		case limit < 0:
		case used > limit:
			return "over"
		case used == limit:
			status = "full"
		}
	}
	return status
}

func limitOr(p *int64) int64 {
	if p == nil {
		return quota.Unlimited
	}
	return *p
}
