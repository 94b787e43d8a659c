package render

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// `kustomize build` prints each resource by encoding it as JSON and that JSON as
// YAML with go-yaml v2 (sigs.k8s.io/yaml.JSONToYAML): keys sorted, comments and
// anchors gone, numbers and strings spelled as v2 spells them. Argo CD applies what
// the CLI prints, and the sidecar's Kustomize output must keep that content, so
// printedForm builds, from a resource's decoded value and without printing it, the
// node that parsing the CLI's output gives: Write then prints the bytes it printed
// when Render parsed the output of the ResMap's AsYaml.

// printedForm returns the node `kustomize build` prints for v, a value as
// kyaml.RNode.Map decodes a resource.
func printedForm(v any) (*kyaml.Node, error) {
	switch v := v.(type) {
	case nil:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	case bool:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}, nil
	case int:
		return printedNumber(strconv.Itoa(v)), nil
	case int64:
		return printedNumber(strconv.FormatInt(v, 10)), nil
	case uint64:
		return printedNumber(strconv.FormatUint(v, 10)), nil
	case float64:
		s, err := jsonFloat(v)
		if err != nil {
			return nil, err
		}
		return printedNumber(s), nil
	case string:
		return printedString(v), nil
	case time.Time:
		// encoding/json writes a time as an RFC 3339 string.
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		s, _ := strconv.Unquote(string(b))
		return printedString(s), nil
	case []any:
		n := &kyaml.Node{Kind: kyaml.SequenceNode, Tag: "!!seq"}
		if len(v) == 0 {
			n.Style = kyaml.FlowStyle // v2 prints an empty list as []
		}
		for _, it := range v {
			c, err := printedForm(it)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	case map[string]any:
		n := &kyaml.Node{Kind: kyaml.MappingNode, Tag: "!!map"}
		if len(v) == 0 {
			n.Style = kyaml.FlowStyle // v2 prints an empty mapping as {}
		}
		keys := make([]string, 0, len(v))
		byKey := make(map[string]any, len(v))
		for k, it := range v {
			jk := jsonText(k)
			keys = append(keys, jk)
			byKey[jk] = it
		}
		// v2's order is not transitive for some sets of keys ("10" < "1a" < "9" <
		// "10"), where its sort, fed from a Go map, gives a different order each
		// time. Sorting the keys as JSON does first makes ours the same every time.
		slices.Sort(keys)
		slices.SortStableFunc(keys, v2KeyCompare)
		for _, k := range keys {
			c, err := printedForm(byKey[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			n.Content = append(n.Content, printedString(k), c)
		}
		return n, nil
	}
	// A mapping with a key that is not a string (e.g. an unquoted 80: under
	// data), which JSON cannot hold: kustomize build fails on it too.
	return nil, fmt.Errorf("a %T cannot be encoded as JSON (a mapping key that is not a string?)", v)
}

// quoteEmptyInFlow makes an empty plain scalar in a flow collection or as a key
// (the A of "{name: x, A}") an empty string rather than null, before the resource
// is decoded. The CLI encodes a resource as JSON by printing it with kyaml first,
// and the emitter cannot write an empty plain scalar there: it quotes it, and the
// value reads back as a string. n must be a copy (ToRNodeSlice copies), as it is
// changed in place.
func quoteEmptyInFlow(n *kyaml.Node, flow bool) {
	if n == nil {
		return
	}
	flow = flow || n.Style&kyaml.FlowStyle != 0
	switch n.Kind {
	case kyaml.DocumentNode, kyaml.SequenceNode:
		for _, c := range n.Content {
			quoteEmptyInFlow(c, flow)
		}
	case kyaml.MappingNode:
		for i, c := range n.Content {
			quoteEmptyInFlow(c, flow || i%2 == 0)
		}
	case kyaml.ScalarNode:
		if flow && n.Value == "" && n.Style == 0 && (n.Tag == "" || n.Tag == "!!null") {
			n.Tag = "!!str"
		}
	}
}

// jsonFloat spells f as encoding/json does.
func jsonFloat(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("the number %v cannot be encoded as JSON", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	s := strconv.FormatFloat(f, format, -1, 64)
	if format == 'e' {
		// encoding/json writes e-7, not e-07.
		if n := len(s); n >= 4 && s[n-4] == 'e' && s[n-3] == '-' && s[n-2] == '0' {
			s = s[:n-2] + s[n-1:]
		}
	}
	return s, nil
}

// printedNumber is a JSON number as v2 reads it back and prints it: an integer when
// it spells one (so 30.0, which JSON spells 30, prints as 30), else a float in Go's
// shortest %g form (1e-07, 1e+21).
func printedNumber(s string) *kyaml.Node {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(i, 10)}
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(u, 10)}
	}
	f, _ := strconv.ParseFloat(s, 64) // a JSON number always parses; out of range it is ±Inf, as in v2
	v := strconv.FormatFloat(f, 'g', -1, 64)
	switch {
	case math.IsInf(f, 1):
		v = ".inf"
	case math.IsInf(f, -1):
		v = "-.inf"
	}
	return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!float", Value: v}
}

// printedString is a string as v2 prints it: a literal block when it spans lines,
// double-quoted when YAML 1.1 would read it plain as something else (yes, on, 0777,
// 1:20, 2024-01-02, ...), else plain; the emitter falls back to quotes where plain
// cannot hold the text, as v2's does.
func printedString(s string) *kyaml.Node {
	s = jsonText(s)
	n := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: s}
	switch {
	case strings.Contains(s, "\n"):
		n.Style = kyaml.LiteralStyle
	case !v2Plain(s):
		n.Style = kyaml.DoubleQuotedStyle
	case s == "<<":
		// v2 prints it plain; read back, it is the merge key, and as such (not
		// as a string, which v3 would quote) kyaml writes it plain again.
		n.Tag = "!!merge"
	}
	return n
}

// jsonText is s as encoding/json carries it: every byte that is not valid UTF-8
// becomes U+FFFD.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// The rest follows go-yaml v2 (go.yaml.in/yaml/v2, Apache License 2.0): resolve.go
// (which plain strings read back as something else), encode.go (isBase60Float) and
// sorter.go (the order of mapping keys).

var (
	v2Words = map[string]bool{
		"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
		"true": true, "True": true, "TRUE": true, "on": true, "On": true, "ON": true,
		"n": true, "N": true, "no": true, "No": true, "NO": true,
		"false": true, "False": true, "FALSE": true, "off": true, "Off": true, "OFF": true,
		"": true, "~": true, "null": true, "Null": true, "NULL": true,
		".nan": true, ".NaN": true, ".NAN": true, ".inf": true, ".Inf": true, ".INF": true,
		"+.inf": true, "+.Inf": true, "+.INF": true, "-.inf": true, "-.Inf": true, "-.INF": true,
	}
	v2Float      = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	v2Base60     = regexp.MustCompile(`^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`)
	v2Timestamps = []string{"2006-1-2T15:4:5.999999999Z07:00", "2006-1-2t15:4:5.999999999Z07:00", "2006-1-2 15:4:5.999999999", "2006-1-2"}
)

// v2Plain reports whether v2 prints s plain: s reads back as a string. ("<<", the
// merge key, is left plain: v2 looks words up only after a letter, digit, sign, dot
// or ~.)
func v2Plain(s string) bool {
	if v2Words[s] {
		return false
	}
	switch s[0] {
	case '.':
		_, err := strconv.ParseFloat(s, 64)
		return err != nil
	case '+', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		return true
	}
	if v2Timestamp(s) {
		return false
	}
	plain := strings.ReplaceAll(s, "_", "")
	if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return false
	}
	if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return false
	}
	if v2Float.MatchString(plain) {
		if _, err := strconv.ParseFloat(plain, 64); err == nil {
			return false
		}
	}
	if rest, ok := strings.CutPrefix(plain, "0b"); ok {
		if _, err := strconv.ParseInt(rest, 2, 64); err == nil {
			return false
		}
		if _, err := strconv.ParseUint(rest, 2, 64); err == nil {
			return false
		}
	} else if rest, ok := strings.CutPrefix(plain, "-0b"); ok {
		if _, err := strconv.ParseInt("-"+rest, 2, 64); err == nil {
			return false
		}
	}
	return !(strings.IndexByte(s, ':') >= 0 && v2Base60.MatchString(s))
}

func v2Timestamp(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i != 4 || i == len(s) || s[i] != '-' {
		return false
	}
	for _, f := range v2Timestamps {
		if _, err := time.Parse(f, s); err == nil {
			return true
		}
	}
	return false
}

// v2KeyCompare orders mapping keys as v2 does: by rune, letters after other
// characters, and runs of digits by their number (a2 before a10).
func v2KeyCompare(a, b string) int {
	if v2KeyLess(a, b) {
		return -1
	}
	if v2KeyLess(b, a) {
		return 1
	}
	return 0
}

func v2KeyLess(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al, bl := unicode.IsLetter(ar[i]), unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}
