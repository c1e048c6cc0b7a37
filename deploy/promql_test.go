package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// aggregations are PromQL's aggregation operators: an identifier among them
// followed by "(" or by "by"/"without" is an operator, not a metric.
var aggregations = []string{
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio",
}

// grouping keywords take a parenthesised list of label names.
var grouping = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// keywords are PromQL words that are neither metrics nor functions.
var keywords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}

// metricNames returns the metric names a PromQL expression selects, sorted
// and without duplicates. It is a tokenizer, not a parser: it skips string
// literals, label matchers ({...}), ranges and subqueries ([...]), Grafana
// variables ($name, ${name}), numbers, the label lists of by, without, on,
// ignoring and group_left/right, function names (an identifier followed by
// "(") and keywords. Grafana's label_values(selector, label) is understood:
// its label argument is not a metric. A selector without a metric name
// ({__name__=...}) and unbalanced brackets or quotes are errors.
func metricNames(expr string) ([]string, error) {
	var names []string
	var calls []string // the function (or "") of each open parenthesis
	lastWasMetric := false
	i := 0
	nextNonSpace := func(j int) (int, byte) {
		for j < len(expr) && isSpace(expr[j]) {
			j++
		}
		if j == len(expr) {
			return j, 0
		}
		return j, expr[j]
	}
	prevNonSpace := func(j int) byte {
		for j--; j >= 0 && isSpace(expr[j]); j-- {
		}
		if j < 0 {
			return 0
		}
		return expr[j]
	}
	for i < len(expr) {
		c := expr[i]
		wasMetric := lastWasMetric
		lastWasMetric = false
		switch {
		case isSpace(c):
			lastWasMetric = wasMetric
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			if !wasMetric {
				return nil, fmt.Errorf("%q: selector at offset %d has no metric name; name the metric before {", expr, i)
			}
			end, err := skipBalanced(expr, i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = end
			lastWasMetric = true // a range or offset may follow
		case c == '[':
			end, err := skipBalanced(expr, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				end, err := skipBalanced(expr, i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
				break
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c == '(':
			calls = append(calls, "")
			i++
		case c == ')':
			if len(calls) == 0 {
				return nil, fmt.Errorf("%q: unbalanced ')' at offset %d", expr, i)
			}
			calls = calls[:len(calls)-1]
			i++
		case isDigit(c) || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			j, next := nextNonSpace(i)
			switch {
			case slices.Contains(grouping, word):
				if next == '(' {
					end, err := skipBalanced(expr, j, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case next == '(':
				calls = append(calls, word)
				i = j + 1
			case slices.Contains(keywords, word):
			case slices.Contains(aggregations, word) && slices.Contains([]string{"by", "without"}, nextWord(expr, j)):
			case len(calls) > 0 && calls[len(calls)-1] == "label_values" &&
				(prevNonSpace(start) == ',' || (prevNonSpace(start) == '(' && next == ')')):
				// label_values(selector, label) or label_values(label): a label name.
			default:
				names = append(names, word)
				lastWasMetric = true
			}
		default:
			i++ // an operator or a comma
		}
	}
	if len(calls) > 0 {
		return nil, fmt.Errorf("%q: %d unclosed '('", expr, len(calls))
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// nextWord returns the identifier starting at expr[j], or "".
func nextWord(expr string, j int) string {
	k := j
	for k < len(expr) && isIdent(expr[k]) {
		k++
	}
	return expr[j:k]
}

// skipString returns the offset just past the string literal starting at
// expr[i] (PromQL: "..." and '...' with backslash escapes, `...` raw).
func skipString(expr string, i int) (int, error) {
	q := expr[i]
	for j := i + 1; j < len(expr); j++ {
		switch expr[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unterminated string at offset %d", expr, i)
}

// skipBalanced returns the offset just past the bracket that closes the one
// at expr[i], skipping string literals.
func skipBalanced(expr string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(expr); j++ {
		switch c := expr[j]; {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("%q: unbalanced %q at offset %d", expr, open, i)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || isDigit(c) }

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
		err        string // a substring of the error; "" for none
	}{
		{name: "bare", expr: "go_goroutines", want: []string{"go_goroutines"}},
		{name: "dashboard rate by operator",
			expr: `sum by (operator) (rate(kstreamd_operator_records_in_total{instance=~"$instance", operator=~"$operator"}[$__rate_interval]))`,
			want: []string{"kstreamd_operator_records_in_total"}},
		{name: "by after the argument",
			expr: `sum(rate(a_total[5m])) by (operator, subtask)`, want: []string{"a_total"}},
		{name: "without", expr: `max without (instance, job) (b)`, want: []string{"b"}},
		{name: "arithmetic and comparison",
			expr: `time() - (kstreamd_broadcast_last_update_timestamp_seconds{a="}"} > 0)`,
			want: []string{"kstreamd_broadcast_last_update_timestamp_seconds"}},
		{name: "scalar factor and filter", expr: `x * 1000 > 1e9`, want: []string{"x"}},
		{name: "vector matching",
			expr: `a / on(instance) group_left(job, "x") b + ignoring (subtask) c`, want: []string{"a", "b", "c"}},
		{name: "group_left without labels", expr: `a * on (instance) group_left b`, want: []string{"a", "b"}},
		{name: "set operators, offset and @",
			expr: `a and b unless c offset 5m or d @ 1609746000`, want: []string{"a", "b", "c", "d"}},
		{name: "histogram",
			expr: `histogram_quantile(0.99, sum without (pod) (rate(h_seconds_bucket[5m])))`, want: []string{"h_seconds_bucket"}},
		{name: "string and number parameters",
			expr: `count_values("v", foo) + topk(5, bar) + label_replace(baz, "dst", "$1", "src", "(.*)")`,
			want: []string{"bar", "baz", "foo"}},
		{name: "subquery", expr: `max_over_time(rate(x_total[1m])[10m:30s])`, want: []string{"x_total"}},
		{name: "colon names", expr: `job:requests:rate5m`, want: []string{"job:requests:rate5m"}},
		{name: "duplicates", expr: `m / m{a="1"} - m`, want: []string{"m"}},
		{name: "grafana variables",
			expr: `rate(m{i=~"${instance}"}[$__interval]) * $factor + ${other}`, want: []string{"m"}},
		{name: "label_values with selector",
			expr: `label_values(kstreamd_operator_records_in_total{instance=~"$instance"}, operator)`,
			want: []string{"kstreamd_operator_records_in_total"}},
		{name: "label_values with metric", expr: `label_values(m, instance)`, want: []string{"m"}},
		{name: "label_values of a label", expr: `label_values(instance)`, want: nil},
		{name: "numbers only", expr: `1 + 2.5 * 0x10`, want: nil},
		{name: "escaped quote", expr: `m{a="x\"}y"}`, want: []string{"m"}},
		{name: "no metric name", expr: `{__name__="m"}`, err: "has no metric name"},
		{name: "unclosed brace", expr: `rate(m{a="1"`, err: "unbalanced"},
		{name: "unclosed paren", expr: `sum(rate(m[1m])`, err: "unclosed"},
		{name: "unterminated string", expr: `m{a="1}`, err: "unterminated string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metricNames(tc.expr)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("metricNames(%q) error = %v, want one containing %q", tc.expr, err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatalf("metricNames(%q): %v", tc.expr, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}
