package app

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"
)

// sortPath is kubectl's relaxed JSONPath (kubectl get --sort-by): a field
// spec with or without its leading dot and braces, e.g. metadata.name,
// .metadata.name or {.metadata.name}.
var sortPath = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// parseSortBy returns the parsed --sort-by, nil for none.
func parseSortBy(field string) (*jsonpath.JSONPath, error) {
	if field == "" {
		return nil, nil
	}
	m := sortPath.FindStringSubmatch(field)
	if m == nil {
		return nil, fmt.Errorf("--sort-by: invalid value %q: want a field spec such as metadata.name, .metadata.name or {.metadata.name}", field)
	}
	spec := m[1]
	if spec == "" {
		spec = m[2]
	}
	p := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := p.Parse("{." + spec + "}"); err != nil {
		return nil, fmt.Errorf("--sort-by: invalid value %q: %w", field, err)
	}
	return p, nil
}

// sortItems orders items, in place, by the value the field spec finds in
// each as -o json prints it, as kubectl get --sort-by orders a list: by the
// first value found, items without one first; equal items keep their
// order. Unlike kubectl it fails, instead of exiting, on a value it cannot
// order (a list, an object, or types that differ between items).
func sortItems[T any](items []T, field string) error {
	p, err := parseSortBy(field)
	if p == nil || err != nil {
		return err
	}
	keys := make([]any, len(items))
	found := false
	for i := range items {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&items[i])
		if err != nil {
			return fmt.Errorf("--sort-by: %w", err)
		}
		res, err := p.FindResults(u)
		if err != nil {
			return fmt.Errorf("--sort-by: %w", err)
		}
		if len(res) > 0 && len(res[0]) > 0 {
			keys[i], found = res[0][0].Interface(), true
		}
	}
	if len(items) > 0 && !found {
		return fmt.Errorf("--sort-by: no item has a field %s", field)
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	var bad error
	slices.SortStableFunc(order, func(i, j int) int {
		c, err := compareKeys(keys[i], keys[j])
		if err != nil && bad == nil {
			bad = fmt.Errorf("--sort-by %s: %w", field, err)
		}
		return c
	})
	if bad != nil {
		return bad
	}
	sorted := make([]T, len(items))
	for i, from := range order {
		sorted[i] = items[from]
	}
	copy(items, sorted)
	return nil
}

// compareKeys orders two values of unstructured JSON: nil first, then
// numbers, strings (timestamps are RFC 3339 strings, in UTC) and booleans
// each among their own kind.
func compareKeys(a, b any) (int, error) {
	switch {
	case a == nil && b == nil:
		return 0, nil
	case a == nil:
		return -1, nil
	case b == nil:
		return 1, nil
	}
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return cmp.Compare(x, y), nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return cmp.Compare(x, y), nil
		}
	case bool:
		if y, ok := b.(bool); ok {
			return cmp.Compare(boolInt(x), boolInt(y)), nil
		}
	case map[string]any, []any:
		return 0, fmt.Errorf("values are lists or objects, not numbers, strings or booleans")
	}
	return 0, fmt.Errorf("cannot order %T against %T", a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
