package monitoring

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// nameMatcher is a selector by exact metric name: {__name__="x"}.
var nameMatcher = regexp.MustCompile(`__name__\s*=\s*"([^"]+)"`)

// metricNames are the metric names a PromQL expression selects: every
// identifier that is not a function or aggregation (followed by "("), a
// keyword, a label in a grouping clause or matcher, a duration, a number,
// a string or a Grafana variable ($x, ${x}), and every exact __name__
// matcher.
func metricNames(expr string) []string {
	var out []string
	for _, m := range nameMatcher.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	l := &lexer{s: expr}
	for l.i < len(l.s) {
		switch c := l.s[l.i]; {
		case c == '"' || c == '\'' || c == '`':
			l.skipString()
		case c == '{':
			l.skipGroup('{', '}')
		case c == '[':
			l.skipGroup('[', ']')
		case c == '$': // a Grafana variable
			if l.i++; l.i < len(l.s) && l.s[l.i] == '{' {
				l.skipGroup('{', '}')
			}
			l.word()
		case c >= '0' && c <= '9' || c == '.': // a number or a duration
			for l.i < len(l.s) && (isIdent(l.s[l.i], true) || l.s[l.i] == '.') {
				l.i++
			}
		case isIdent(c, false):
			if name := l.identifier(); name != "" {
				out = append(out, name)
			}
		default:
			l.i++
		}
	}
	return out
}

// lexer walks a PromQL expression; i is the next byte.
type lexer struct {
	s string
	i int
}

// identifier reads a word and returns it if it names a metric. A grouping
// keyword also skips its label list.
func (l *lexer) identifier() string {
	word := l.word()
	lower := strings.ToLower(word)
	switch {
	case groupingKeywords[lower]:
		if l.next() == '(' {
			for l.s[l.i] != '(' {
				l.i++
			}
			l.skipGroup('(', ')')
		}
		return ""
	case keywords[lower] || l.next() == '(':
		return ""
	}
	return word
}

func (l *lexer) word() string {
	start := l.i
	for l.i < len(l.s) && isIdent(l.s[l.i], true) {
		l.i++
	}
	return l.s[start:l.i]
}

// next is the next byte that is not a space, 0 at the end.
func (l *lexer) next() byte {
	for j := l.i; j < len(l.s); j++ {
		if c := l.s[j]; c != ' ' && c != '\t' && c != '\n' {
			return c
		}
	}
	return 0
}

// skipGroup moves past the group opened at i, strings inside included.
func (l *lexer) skipGroup(open, close byte) {
	depth := 0
	for l.i < len(l.s) {
		switch l.s[l.i] {
		case '"', '\'', '`':
			l.skipString()
			continue
		case open:
			depth++
		case close:
			if depth--; depth == 0 {
				l.i++
				return
			}
		}
		l.i++
	}
}

// skipString moves past the string literal starting at i.
func (l *lexer) skipString() {
	q := l.s[l.i]
	for j := l.i + 1; j < len(l.s); j++ {
		switch {
		case l.s[j] == '\\' && q != '`':
			j++
		case l.s[j] == q:
			l.i = j + 1
			return
		}
	}
	l.i = len(l.s)
}

func isIdent(c byte, inside bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || inside && c >= '0' && c <= '9'
}

// groupingKeywords take a parenthesised list of labels.
var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are PromQL's words that are no metric: binary operators,
// modifiers, the special numbers and the aggregation operators (which may
// come before their parenthesis: sum by (x) (...)).
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "nan": true, "inf": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (class, node) (rate(qgpu_a_total{node=~"$node", x="by (y}"}[$__rate_interval]))`, []string{"qgpu_a_total"}},
		{`a / on (node) group_left (model) b`, []string{"a", "b"}},
		{`count(c{x="1"} == 0) or vector(0)`, []string{"c"}},
		{`histogram_quantile(0.99, sum without (pod) (rate(d_bucket[5m] offset 1h)))`, []string{"d_bucket"}},
		{`e > bool 1e9 and f unless g`, []string{"e", "f", "g"}},
		{`max by (model) (h) / ${x} * Inf`, []string{"h"}},
		{`{__name__="i"} + j{__name__=~"k.*"}`, []string{"i", "j"}},
		{`job:rule:rate5m`, []string{"job:rule:rate5m"}},
		{`label_join(m, "dst", ",", "a", "b")`, []string{"m"}},
	}
	for _, tc := range cases {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// The lexer ends on any input and returns only identifiers.
func FuzzMetricNames(f *testing.F) {
	f.Add(`sum by (a) (rate(x{y="z"}[5m]))`)
	f.Add(`a{b="\"}"} / on( c ) d`)
	f.Fuzz(func(t *testing.T, expr string) {
		for _, m := range metricNames(expr) {
			if m == "" {
				t.Errorf("empty name from %q", expr)
			}
		}
	})
}
