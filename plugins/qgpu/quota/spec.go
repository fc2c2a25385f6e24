// Package quota holds the per-namespace limits by GPU model
// (docs/quota.md): how they are declared in the qgpu-quota ConfigMap, how
// they are parsed, and the tally of what each namespace holds, fed by the
// ledger so that it counts exactly the ledger's assumed and bound holdings.
// It imports nothing from the scheduler framework, so kubectl-qgpu reads
// the same ConfigMap with the same rules.
package quota

import (
	"fmt"
	"math"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Where the limits live: one ConfigMap, in the namespace the scheduler and
// the agent run in, so that writing it takes the rights of that namespace,
// not of the namespace being limited. The scheduler reads it in its own
// namespace (Namespace); ConfigMapNamespace is the shipped one, the
// default.
const (
	ConfigMapNamespace = "qgpu-system"
	ConfigMapName      = "qgpu-quota"
)

// NamespaceEnv is the variable manifests/scheduler sets to the scheduler
// pod's namespace (the downward API).
const NamespaceEnv = "POD_NAMESPACE"

// Namespace is the namespace of the qgpu-quota ConfigMap the scheduler
// reads: its own pod's, as NamespaceEnv names it, else ConfigMapNamespace
// (a scheduler run outside a pod).
func Namespace(getenv func(string) string) string {
	if ns := getenv(NamespaceEnv); ns != "" {
		return ns
	}
	return ConfigMapNamespace
}

// AnyModel is the model key that matches every card model: a limit over
// all models together.
const AnyModel = "*"

// Unlimited marks a dimension a limit does not bound.
const Unlimited = -1

// Limit is a namespace's limit on one model.
type Limit struct {
	// Model is the key as written: a card matches it when the key is a
	// case-insensitive substring of the card's model (the rule of
	// nvidia.com/use-gputype), or when it is AnyModel.
	Model string
	// Cores is in hundredths of a card (qgpu-core units: 100 = one whole
	// card), Unlimited when the limit sets no cards.
	Cores int64
	// MemoryGiB is Unlimited when the limit sets no memory.
	MemoryGiB int64
}

// Matches reports whether a card of the model counts against the limit.
func (l Limit) Matches(model string) bool {
	return l.Model == AnyModel || strings.Contains(strings.ToLower(model), strings.ToLower(l.Model))
}

// Spec is one namespace's limits, sorted by model key.
type Spec []Limit

// entry is the YAML of one model's limit.
type entry struct {
	// Cards is whole-card equivalents, to two decimals (1.5 = 150 qgpu-core).
	Cards *float64 `json:"cards,omitempty"`
	// MemoryGiB is card memory in GiB.
	MemoryGiB *int64 `json:"memoryGiB,omitempty"`
}

// maxCards bounds a limit so that hundredths never overflow.
const maxCards = 1 << 40

// ParseSpec parses one namespace's entry of the ConfigMap: a map from model
// key to {cards, memoryGiB}. Errors name the field (data[ns].model.cards)
// and the value; the field names are strict.
func ParseSpec(namespace, value string) (Spec, error) {
	at := fmt.Sprintf("data[%s]", namespace)
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("%s: key %q is not a namespace name: %s", at, namespace, strings.Join(errs, "; "))
	}
	var raw map[string]entry
	if err := yaml.UnmarshalStrict([]byte(value), &raw); err != nil {
		return nil, fmt.Errorf("%s: value %q: want a map of model to {cards, memoryGiB}: %w", at, clip(value, 80), err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: value %q names no model (want e.g. \"T4: {cards: 2, memoryGiB: 30}\")", at, value)
	}
	spec := make(Spec, 0, len(raw))
	for model, e := range raw {
		l, err := parseLimit(at, model, e)
		if err != nil {
			return nil, err
		}
		spec = append(spec, l)
	}
	sort.Slice(spec, func(i, j int) bool { return spec[i].Model < spec[j].Model })
	return spec, nil
}

func parseLimit(at, model string, e entry) (Limit, error) {
	at = fmt.Sprintf("%s.%s", at, model)
	if strings.TrimSpace(model) != model || model == "" || strings.Contains(model, ",") {
		return Limit{}, fmt.Errorf("%s: model key %q must be non-empty, without spaces at its ends or commas", at, model)
	}
	if e.Cards == nil && e.MemoryGiB == nil {
		return Limit{}, fmt.Errorf("%s: sets neither cards nor memoryGiB", at)
	}
	l := Limit{Model: model, Cores: Unlimited, MemoryGiB: Unlimited}
	if e.Cards != nil {
		c := *e.Cards
		hundredths := math.Round(c * protocol.CoresPerCard)
		if math.IsNaN(c) || c < 0 || c > maxCards || math.Abs(hundredths-c*protocol.CoresPerCard) > 1e-6 {
			return Limit{}, fmt.Errorf("%s.cards: value %v must be a number of cards between 0 and %d with at most two decimals", at, c, int64(maxCards))
		}
		l.Cores = int64(hundredths)
	}
	if e.MemoryGiB != nil {
		if *e.MemoryGiB < 0 {
			return Limit{}, fmt.Errorf("%s.memoryGiB: value %d must not be negative", at, *e.MemoryGiB)
		}
		l.MemoryGiB = *e.MemoryGiB
	}
	return l, nil
}

// ParseConfigMap parses every namespace's entry. A broken entry is
// reported in errs and left out of specs; the others stand on their own.
func ParseConfigMap(cm *v1.ConfigMap) (specs map[string]Spec, errs map[string]error) {
	specs, errs = map[string]Spec{}, map[string]error{}
	if cm == nil {
		return specs, errs
	}
	for ns, value := range cm.Data {
		spec, err := ParseSpec(ns, value)
		if err != nil {
			errs[ns] = err
			continue
		}
		specs[ns] = spec
	}
	for ns := range cm.BinaryData {
		errs[ns] = fmt.Errorf("binaryData[%s]: limits must be under data, not binaryData", ns)
	}
	return specs, errs
}

// FormatCards prints hundredths of a card as cards: 150 → "1.5".
func FormatCards(cores int64) string {
	if cores == Unlimited {
		return "-"
	}
	s := fmt.Sprintf("%d.%02d", cores/protocol.CoresPerCard, cores%protocol.CoresPerCard)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// clip shortens a value quoted in an error.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
