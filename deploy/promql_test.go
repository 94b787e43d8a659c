package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// A careful reading of PromQL, enough to check the dashboard's and the alerts'
// queries against the daemon's metrics without Prometheus' parser (which would pull
// Prometheus into this module): vector selectors with their label matchers, and the
// labels of by/without/on/ignoring/group_left/group_right clauses. Anything it does
// not know (a function, a character) is an error, so a query it cannot read fails
// the test rather than passing unchecked.

type matcher struct{ label, op, value string }

type selector struct {
	metric   string
	matchers []matcher
}

type promql struct {
	selectors []selector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
}

// promqlFunctions are the functions and aggregations the queries may call.
var promqlFunctions = map[string]bool{
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "topk": true, "bottomk": true, "quantile": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "deriv": true, "idelta": true,
	"histogram_quantile": true, "absent": true, "absent_over_time": true, "clamp_min": true, "clamp_max": true,
	"max_over_time": true, "min_over_time": true, "avg_over_time": true, "sum_over_time": true, "changes": true, "resets": true,
	"abs": true, "round": true, "ceil": true, "floor": true, "vector": true, "scalar": true, "time": true, "sort": true, "sort_desc": true,
}

// promqlKeywords are words that are neither metrics nor functions.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// promqlGrouping are the keywords followed by a parenthesised list of labels.
var promqlGrouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

func isIdentStart(r byte) bool { return r == '_' || r == ':' || unicode.IsLetter(rune(r)) }
func isIdent(r byte) bool      { return isIdentStart(r) || (r >= '0' && r <= '9') }

// parsePromQL reads expr's selectors and grouping labels.
func parsePromQL(expr string) (promql, error) {
	var out promql
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(s) && isIdent(s[i]) {
			i++
		}
		return s[start:i]
	}
	// str reads a quoted string at i.
	str := func() (string, error) {
		q := s[i]
		i++
		var b strings.Builder
		for i < len(s) && s[i] != q {
			if s[i] == '\\' && q != '`' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
			i++
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated string at %d", i)
		}
		i++
		return b.String(), nil
	}
	// matchers reads {label op "value", ...} at i.
	matchers := func() ([]matcher, error) {
		i++ // {
		var ms []matcher
		for {
			skipSpace()
			if i < len(s) && s[i] == '}' {
				i++
				return ms, nil
			}
			if i >= len(s) || !isIdentStart(s[i]) {
				return nil, fmt.Errorf("label name expected at %d", i)
			}
			label := ident()
			skipSpace()
			var op string
			for _, o := range []string{"=~", "!~", "!=", "="} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("matcher operator expected after %s at %d", label, i)
			}
			i += len(op)
			skipSpace()
			if i >= len(s) || (s[i] != '"' && s[i] != '\'' && s[i] != '`') {
				return nil, fmt.Errorf("quoted value expected for %s at %d", label, i)
			}
			v, err := str()
			if err != nil {
				return nil, err
			}
			ms = append(ms, matcher{label, op, v})
			skipSpace()
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return out, nil
		}
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if _, err := str(); err != nil {
				return out, err
			}
		case c == '[': // a range or subquery: durations, Grafana's $__rate_interval
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return out, fmt.Errorf("unterminated [ at %d", i)
			}
			i += end + 1
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') { // 0.95, 1e3, 5m
				i++
			}
		case c == '$': // a Grafana variable outside a string
			i++
			ident()
		case c == '{':
			return out, fmt.Errorf("a selector without a metric name at %d", i)
		case isIdentStart(c):
			word := ident()
			skipSpace()
			next := byte(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case promqlGrouping[word]:
				if next != '(' {
					if word == "group_left" || word == "group_right" {
						continue // without a label list
					}
					return out, fmt.Errorf("%s without a label list", word)
				}
				end := strings.IndexByte(s[i:], ')')
				if end < 0 {
					return out, fmt.Errorf("unterminated %s (", word)
				}
				for _, l := range strings.Split(s[i+1:i+end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						out.grouping = append(out.grouping, l)
					}
				}
				i += end + 1
			case promqlKeywords[strings.ToLower(word)]:
			case promqlFunctions[word]: // sum by (x) (...) too
			case next == '(':
				return out, fmt.Errorf("unknown function %s", word)
			default:
				sel := selector{metric: word}
				if next == '{' {
					ms, err := matchers()
					if err != nil {
						return out, err
					}
					sel.matchers = ms
				}
				out.selectors = append(out.selectors, sel)
			}
		case strings.ContainsRune("()+-*/%^,<>=!", rune(c)):
			i++
		default:
			return out, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
}

func TestParsePromQL(t *testing.T) {
	for _, c := range []struct {
		expr     string
		metrics  []string
		grouping []string
		matchers []matcher
		err      string
	}{
		{expr: `up{job="x"} == 0`, metrics: []string{"up"}, matchers: []matcher{{"job", "=", "x"}}},
		{expr: `histogram_quantile(0.95, sum by (le, strategy) (rate(a_bucket{namespace=~"$namespace"}[$__rate_interval])))`,
			metrics: []string{"a_bucket"}, grouping: []string{"le", "strategy"}, matchers: []matcher{{"namespace", "=~", "$namespace"}}},
		{expr: "sum(rate(a{s=~\"5..|429\"}[5m])) by (registry) / sum without (x) (rate(b[5m])) > 0.1 and c >= 5",
			metrics: []string{"a", "b", "c"}, grouping: []string{"registry", "x"}, matchers: []matcher{{"s", "=~", "5..|429"}}},
		{expr: `absent(up{job="a, b"}) or vector(0) offset 5m`, metrics: []string{"up"}, matchers: []matcher{{"job", "=", "a, b"}}},
		{expr: `a * on (pod) group_left (node) b`, metrics: []string{"a", "b"}, grouping: []string{"pod", "node"}},
		{expr: `a{x!="y",z!~'w'}`, metrics: []string{"a"}, matchers: []matcher{{"x", "!=", "y"}, {"z", "!~", "w"}}},
		{expr: `label_join(a, "x")`, err: "unknown function label_join"},
		{expr: `{__name__="a"}`, err: "without a metric name"},
		{expr: `a{x="y"`, err: "label name expected"},
		{expr: `a{x ~ "y"}`, err: "matcher operator"},
		{expr: `a @ 5`, err: "unexpected"},
	} {
		p, err := parsePromQL(c.expr)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.expr, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		var metrics []string
		var ms []matcher
		for _, s := range p.selectors {
			metrics = append(metrics, s.metric)
			ms = append(ms, s.matchers...)
		}
		if !slices.Equal(metrics, c.metrics) || !slices.Equal(p.grouping, c.grouping) || !slices.Equal(ms, c.matchers) {
			t.Errorf("%s: metrics %q grouping %q matchers %q; want %q %q %q", c.expr, metrics, p.grouping, ms, c.metrics, c.grouping, c.matchers)
		}
	}
}
