package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/suggest"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlerr"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The configuration and registries files are read twice: first as YAML nodes,
// which know their line and column, to find syntax errors, unknown or repeated keys
// and values of the wrong shape at every level; then, once that passed, as JSON for
// the values (sources.go), whose own errors name the key.

// FileError is a problem at a place in the configuration or registries file: a
// YAML syntax error, an unknown or repeated key, a value of the wrong shape. It is
// bad input.
type FileError struct {
	Source       string // "config FILE" or "registries config FILE"
	Key          string // the key path, e.g. registries[0].insecur; "" for the document
	Line, Column int    // 1-based; 0: not known
	Msg          string // what is wrong; "" for Err's message
	Err          error  // the underlying error, if any
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Key != "" {
		b.WriteString(" key " + e.Key)
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, " (line %d, column %d)", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	msg := e.Msg
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return b.String() + ": " + msg
}

// shape is what a YAML node of a file must be: a mapping (of keys, or of any key to
// values), a list, a scalar of a type, or anything (nil).
type shape struct {
	kind   reflect.Kind      // reflect.Map, Slice, String, Bool, Int64, Float64; Interface: any scalar
	keys   []string          // Map: the keys accepted, in documentation order; nil: any key
	fields map[string]*shape // Map: each key's value; with keys nil, fields[""] is every value's
	item   *shape            // Slice: each item
	// accepted, if set, says what is accepted instead of describing the shape.
	accepted string
}

func mapOf(keys []string, fields map[string]*shape) *shape {
	return &shape{kind: reflect.Map, keys: keys, fields: fields}
}

// configShape is the configuration file: the settings, and the sections
// registries, rateLimits, redis, trust and git.
func configShape() *shape {
	fields := map[string]*shape{
		"registries": {kind: reflect.Slice, item: structShape(reflect.TypeFor[resolve.RegistryConfig]())},
		"rateLimits": {kind: reflect.Slice, item: structShape(reflect.TypeFor[resolve.RateLimit]())},
		"redis":      mapOf(sectionKeys(redisSection, redisSettings()), nil),
		"trust": mapOf(sectionKeys(trustSection, trustSettings()), map[string]*shape{
			"keys": {kind: reflect.Map, fields: map[string]*shape{"": {kind: reflect.String}},
				accepted: "a mapping of key names to PEM files, e.g. {release: /etc/argocd-image-resolver/keys/release.pub}"},
		}),
	}
	fields["webhooks"] = &shape{kind: reflect.Map, fields: map[string]*shape{"": structShape(reflect.TypeFor[Webhook]())},
		accepted: webhooksAccepted}
	git := structShape(reflect.TypeFor[GitConfig]())
	git.keys = append(git.keys, sectionKeys(gitSection, gitSettings())...)
	fields["git"] = git
	return mapOf(fileKeys(), fields)
}

// registriesShape is the registries file: registries: and nothing else.
func registriesShape() *shape {
	return mapOf([]string{"registries"}, map[string]*shape{
		"registries": {kind: reflect.Slice, item: structShape(reflect.TypeFor[resolve.RegistryConfig]())},
	})
}

func sectionKeys(section string, settings []Setting) []string {
	var keys []string
	for _, s := range settings {
		keys = append(keys, strings.TrimPrefix(s.Key, section))
	}
	return keys
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// structShape is the mapping a struct is decoded from: its JSON keys.
func structShape(t reflect.Type) *shape {
	sh := mapOf(nil, map[string]*shape{})
	sh.keys = []string{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		sh.keys = append(sh.keys, name)
		sh.fields[name] = typeShape(f.Type)
	}
	return sh
}

func typeShape(t reflect.Type) *shape {
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return &shape{kind: reflect.Interface} // its own parser says what it takes
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeShape(t.Elem())
	case reflect.Struct:
		return structShape(t)
	case reflect.Slice:
		return &shape{kind: reflect.Slice, item: typeShape(t.Elem())}
	case reflect.Map:
		return mapOf(nil, map[string]*shape{"": typeShape(t.Elem())})
	case reflect.String:
		return &shape{kind: reflect.String}
	case reflect.Bool:
		return &shape{kind: reflect.Bool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &shape{kind: reflect.Int64}
	case reflect.Float32, reflect.Float64:
		return &shape{kind: reflect.Float64}
	}
	return nil
}

// checkYAML parses raw as one YAML document and checks it against sh; source
// names the file. It returns whether the document has any content.
func checkYAML(source string, raw []byte, sh *shape) (bool, error) {
	docs, err := yamlerr.Parse(raw)
	if err != nil {
		if loc := yamlerr.Locate(raw, err); loc != nil {
			msg := "YAML syntax: " + loc.Problem
			if loc.Line > 0 && strings.Contains(lineOf(raw, loc.Line), "*") {
				msg += ` (a "*" must be quoted in YAML: registry: "*")`
			}
			return false, &FileError{Source: source, Line: loc.Line, Column: loc.Column, Msg: msg}
		}
		return false, &FileError{Source: source, Msg: err.Error()}
	}
	if len(docs) > 1 {
		return false, &FileError{Source: source, Line: docs[1].Line, Msg: "more than one YAML document (accepted: one)"}
	}
	if len(docs) == 0 || len(docs[0].Content) == 0 || isNull(docs[0].Content[0]) {
		return false, nil
	}
	c := checker{source: source}
	c.node(docs[0].Content[0], "", sh)
	return true, joinErrs(c.errs)
}

func lineOf(raw []byte, line int) string {
	lines := strings.SplitN(string(raw), "\n", line+1)
	if line > len(lines) {
		return ""
	}
	return lines[line-1]
}

func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return multiError(errs)
}

// multiError is several problems, one a line; errors.As finds the first.
type multiError []error

func (m multiError) Error() string {
	var lines []string
	for _, e := range m {
		lines = append(lines, e.Error())
	}
	return strings.Join(lines, "\n")
}

func (m multiError) Unwrap() []error { return m }

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

type checker struct {
	source string
	errs   []error
}

func (c *checker) fail(n *yaml.Node, path, format string, args ...any) {
	c.errs = append(c.errs, &FileError{Source: c.source, Key: path, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// node checks n, at key path, against sh.
func (c *checker) node(n *yaml.Node, path string, sh *shape) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if sh == nil || isNull(n) {
		return
	}
	switch sh.kind {
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n, path, "is %s (accepted: %s)", describe(n), describeShape(sh))
			return
		}
		c.mapping(n, path, sh, map[string]int{})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(n, path, "is %s (accepted: %s)", describe(n), describeShape(sh))
			return
		}
		for i, item := range n.Content {
			c.node(item, fmt.Sprintf("%s[%d]", path, i), sh.item)
		}
	default:
		switch {
		case n.Kind == yaml.ScalarNode && sh.kind == reflect.String && !scalarFits(n, sh.kind):
			c.fail(n, path, "is %s (accepted: a string; quote it: %q)", describe(n), n.Value)
		case n.Kind != yaml.ScalarNode || !scalarFits(n, sh.kind):
			c.fail(n, path, "is %s (accepted: %s)", describe(n), describeShape(sh))
		}
	}
}

// mapping checks the keys of n and their values; seen holds the keys met so far.
// A merge key (<<) brings those of another mapping, checked on their own: the
// keys written beside it override them.
func (c *checker) mapping(n *yaml.Node, path string, sh *shape, seen map[string]int) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			c.fail(k, path, "a key is %s (accepted: string keys)", describe(k))
			continue
		}
		if k.Value == "<<" && k.Tag == "!!merge" {
			if v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			if v.Kind == yaml.MappingNode {
				c.mapping(v, path, sh, map[string]int{}) // keys written here override these
			}
			continue
		}
		kp := joinKey(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			c.fail(k, kp, "duplicate key (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		if sh.keys != nil && !slices.Contains(sh.keys, k.Value) {
			hint := suggest.DidYouMean(k.Value, sh.keys)
			if section, key, ok := strings.Cut(k.Value, "."); ok && sh.fields[section] != nil && sh.fields[section].kind == reflect.Map {
				hint = fmt.Sprintf("; write it in its section: %s: {%s: ...}", section, key)
			}
			c.fail(k, "", "unknown key %q%s (accepted: %s)", kp, hint, strings.Join(sh.keys, ", "))
			continue
		}
		if sh.keys == nil {
			c.node(v, kp, sh.fields[""])
		} else {
			c.node(v, kp, sh.fields[k.Value])
		}
	}
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yaml11Bools are the words YAML 1.1 (the JSON conversion's) reads as booleans
// besides true and false.
var yaml11Bools = []string{"y", "yes", "n", "no", "on", "off"}

// scalarFits reports whether scalar n can be decoded as kind.
func scalarFits(n *yaml.Node, kind reflect.Kind) bool {
	switch kind {
	case reflect.String:
		return n.Tag == "!!str" || n.Tag == "!!timestamp" || n.Tag == "!!binary"
	case reflect.Bool:
		return n.Tag == "!!bool" || slices.Contains(yaml11Bools, strings.ToLower(n.Value))
	case reflect.Int64:
		return n.Tag == "!!int"
	case reflect.Float64:
		return n.Tag == "!!int" || n.Tag == "!!float"
	}
	return true
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return fmt.Sprintf("the string %q", n.Value)
	}
	return "empty"
}

func describeShape(sh *shape) string {
	if sh.accepted != "" {
		return sh.accepted
	}
	switch sh.kind {
	case reflect.Map:
		if sh.keys == nil {
			return "a mapping of names to values"
		}
		return "a mapping with keys " + strings.Join(sh.keys, ", ")
	case reflect.Slice:
		if sh.item != nil && sh.item.kind == reflect.Map && sh.item.keys != nil {
			return "a list of mappings with keys " + strings.Join(sh.item.keys, ", ")
		}
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return "a single value"
}
