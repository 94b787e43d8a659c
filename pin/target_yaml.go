package pin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/oneline"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// yamlFile is one YAML document being read or edited by a target. Edits change
// the node tree (kyaml's yaml.v3 nodes); the output is then either the original
// bytes with only the changed values spliced in (when every change was a value on
// one line, a key added after a one-line key, or a one-line key removed) or, when
// the change is structural (a new list entry, a new mapping), the tree encoded by
// kyaml with the file's indentation and list style, which keeps comments and key
// order but respaces comments and values; the blank lines of the file are put
// back. The spliced text, and the blank lines put back, are kept only when the
// result parses back into the very tree the edits made: the YAML is the same
// whichever way it is written.
type yamlFile struct {
	name  string // the file, for messages
	src   []byte
	lines []int // byte offset of each line's start
	doc   *kyaml.Node
	// ops are the pending splices; byNode finds the replacement of a node.
	ops        []*yamlSplice
	byNode     map[*kyaml.Node]*yamlSplice
	changed    bool
	structural bool
	// indent and wide are the file's layout for encoding: spaces per level, and
	// whether list items are indented under their key.
	indent int
	wide   bool
}

// yamlSplice replaces src[start:end] by text.
type yamlSplice struct {
	start, end int
	text       string
	seq        int
}

// parseYAMLFile parses content, which must hold at most one YAML document whose
// content is a mapping (or nothing).
func parseYAMLFile(name string, content []byte) (*yamlFile, error) {
	f := &yamlFile{name: name, src: content, byNode: map[*kyaml.Node]*yamlSplice{}}
	f.lines = append(f.lines, 0)
	for i, c := range content {
		if c == '\n' {
			f.lines = append(f.lines, i+1)
		}
	}
	dec := kyaml.NewDecoder(bytes.NewReader(content))
	var doc kyaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("file %s: %s", name, oneline.Fold(err.Error()))
		}
		doc = kyaml.Node{Kind: kyaml.DocumentNode}
	}
	var extra kyaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("file %s: %s", name, oneline.Fold(err.Error()))
		}
		return nil, fmt.Errorf("file %s (line %d): more than one YAML document (accepted: one document, a mapping)", name, extra.Line)
	}
	if doc.Kind != kyaml.DocumentNode {
		doc = kyaml.Node{Kind: kyaml.DocumentNode, Content: []*kyaml.Node{&doc}}
	}
	f.doc = &doc
	f.indent, f.wide = yamlLayout(f.doc, string(content))
	if r := f.root(); r != nil && r.Kind != kyaml.MappingNode {
		return nil, fmt.Errorf("file %s (line %d): the document is %s (accepted: a mapping)", name, r.Line, yamlnode.Describe(r))
	}
	return f, nil
}

// root is the document's mapping; nil when the document is empty or null.
func (f *yamlFile) root() *kyaml.Node {
	if len(f.doc.Content) == 0 || yamlnode.IsNull(f.doc.Content[0]) {
		return nil
	}
	return f.doc.Content[0]
}

// ensureRoot returns the document's mapping, creating it in an empty document.
func (f *yamlFile) ensureRoot() *kyaml.Node {
	if r := f.root(); r != nil {
		return r
	}
	m := newMappingNode()
	if len(f.doc.Content) > 0 {
		old := f.doc.Content[0]
		m.HeadComment, m.LineComment, m.FootComment = old.HeadComment, old.LineComment, old.FootComment
	}
	f.doc.Content = []*kyaml.Node{m}
	f.markStructural()
	return m
}

func (f *yamlFile) markStructural() {
	f.changed = true
	f.structural = true
}

// joinKeyPath spells the path of key under parent for messages: images[2].newTag,
// pins.web; a key at the top (parent "") is its own path.
func joinKeyPath(parent string, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// where names a place of the file for messages: "file F key K (line N)".
func (f *yamlFile) where(path string, n *kyaml.Node) string {
	s := "file " + f.name
	if path != "" {
		s += " key " + path
	}
	if n != nil && n.Line > 0 {
		s += fmt.Sprintf(" (line %d)", n.Line)
	}
	return s
}

// field finds key in mapping m: its key and value nodes, nil when absent. A key
// written twice is an error; so is a value that is a YAML alias.
func (f *yamlFile) field(m *kyaml.Node, path, key string) (k, v *kyaml.Node, err error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn := m.Content[i]
		if kn.Kind != kyaml.ScalarNode || kn.Value != key {
			continue
		}
		if k != nil {
			return nil, nil, fmt.Errorf("%s: written twice (lines %d and %d)", f.where(joinKeyPath(path, key), nil), k.Line, kn.Line)
		}
		k, v = kn, m.Content[i+1]
	}
	if v != nil && v.Kind == kyaml.AliasNode {
		return nil, nil, fmt.Errorf("%s: a YAML alias (*%s) is not supported here (accepted: the value itself)", f.where(joinKeyPath(path, key), v), v.Value)
	}
	return k, v, nil
}

// fieldIndex is the index in m.Content of key's key node, -1 when absent.
func fieldIndex(m *kyaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if kn := m.Content[i]; kn.Kind == kyaml.ScalarNode && kn.Value == key {
			return i
		}
	}
	return -1
}

// scalarValue is the text of a scalar value ("" for null), or an error naming
// the key when the value is a mapping or a list.
func (f *yamlFile) scalarValue(path string, v *kyaml.Node) (string, error) {
	if v == nil || yamlnode.IsNull(v) {
		return "", nil
	}
	if v.Kind != kyaml.ScalarNode {
		return "", fmt.Errorf("%s: is %s (accepted: a string)", f.where(path, v), yamlnode.Describe(v))
	}
	return v.Value, nil
}

// setScalar makes the existing scalar v the string value; nothing changes when it
// already is. The original quoting style is kept; a value that would not read
// back as a string (1.10, yes, 0777) is double-quoted.
func (f *yamlFile) setScalar(path string, v *kyaml.Node, value string) error {
	if v.Kind != kyaml.ScalarNode {
		return fmt.Errorf("%s: is %s (accepted: a string)", f.where(path, v), yamlnode.Describe(v))
	}
	if v.Anchor != "" {
		return fmt.Errorf("%s: has a YAML anchor (&%s) other values may use; not supported (accepted: a value without anchor)", f.where(path, v), v.Anchor)
	}
	if v.Value == value && v.ShortTag() == "!!str" && !(v.Style == 0 && kyaml.IsYaml1_1NonString(v)) {
		return nil
	}
	orig := *v
	text, style, ok := renderScalar(value, v.Style&(kyaml.DoubleQuotedStyle|kyaml.SingleQuotedStyle))
	v.Value, v.Tag, v.Style = value, "!!str", style
	f.changed = true
	if !ok {
		f.structural = true
		return nil
	}
	if op := f.byNode[v]; op != nil {
		op.text = text
		return nil
	}
	start, end, ok := f.extent(&orig)
	if !ok {
		f.structural = true
		return nil
	}
	op := &yamlSplice{start: start, end: end, text: text, seq: len(f.ops)}
	f.ops = append(f.ops, op)
	f.byNode[v] = op
	return nil
}

// setField sets key of mapping m (at path) to the string value. A missing key is
// added after the last key of m that comes before it in order (keys not in order
// count as coming first), or first when there is none.
func (f *yamlFile) setField(m *kyaml.Node, path, key, value string, order []string) error {
	k, v, err := f.field(m, path, key)
	if err != nil {
		return err
	}
	if k != nil {
		return f.setScalar(joinKeyPath(path, key), v, value)
	}
	text, style, ok := renderScalar(value, 0)
	nv := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: value, Style: style}
	return f.insertField(m, key, nv, text, ok, order)
}

// insertField adds key: v to m at its place in order; text is v's one-line
// rendering when ok.
func (f *yamlFile) insertField(m *kyaml.Node, key string, v *kyaml.Node, text string, ok bool, order []string) error {
	rank := slices.Index(order, key)
	at := 0 // index in m.Content of the new key
	for i := 0; i+1 < len(m.Content); i += 2 {
		if r := slices.Index(order, m.Content[i].Value); rank < 0 || r < rank {
			at = i + 2
		}
	}
	kn := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: key}
	m.Content = slices.Insert(m.Content, at, kn, v)
	f.changed = true
	if !ok || at == 0 || m.Style&kyaml.FlowStyle != 0 {
		f.structural = true
		return nil
	}
	// A splice: a new line after the previous key, when that key and its value
	// are on one line.
	pk, pv := m.Content[at-2], m.Content[at-1]
	if pk.Line == 0 || pv.Line != pk.Line || pv.Kind != kyaml.ScalarNode {
		f.structural = true
		return nil
	}
	if _, _, ok := f.extent(pv); !ok && f.byNode[pv] == nil { // a value spliced already is on one line
		f.structural = true
		return nil
	}
	keyText, _, ok := renderScalar(key, 0)
	if !ok {
		f.structural = true
		return nil
	}
	pos := len(f.src)
	prefix := ""
	if pk.Line < len(f.lines) {
		pos = f.lines[pk.Line]
	} else if len(f.src) > 0 && f.src[len(f.src)-1] != '\n' {
		prefix = "\n"
	}
	eol := "\n"
	if pos >= 2 && f.src[pos-2] == '\r' {
		eol = "\r\n"
	}
	line := prefix + strings.Repeat(" ", pk.Column-1) + keyText + ": " + text + eol
	f.ops = append(f.ops, &yamlSplice{start: pos, end: pos, text: line, seq: len(f.ops)})
	return nil
}

// removeField removes key from mapping m, if there.
func (f *yamlFile) removeField(m *kyaml.Node, key string) {
	i := fieldIndex(m, key)
	if i < 0 {
		return
	}
	k, v := m.Content[i], m.Content[i+1]
	m.Content = slices.Delete(m.Content, i, i+2)
	f.changed = true
	// A splice: the line of a one-line key: value that holds nothing else.
	if k.Line == 0 || v.Line != k.Line || v.Kind != kyaml.ScalarNode || f.byNode[v] != nil || m.Style&kyaml.FlowStyle != 0 {
		f.structural = true
		return
	}
	_, end, ok := f.extent(v)
	if !ok || k.Line >= len(f.lines) {
		f.structural = true
		return
	}
	start := f.lines[k.Line-1]
	next := f.lines[k.Line]
	before := string(f.src[start:f.offset(k)])
	after := strings.TrimLeft(string(f.src[end:next]), " \t")
	if strings.TrimLeft(before, " ") != "" || !(after == "\n" || after == "\r\n" || strings.HasPrefix(after, "#")) {
		f.structural = true
		return
	}
	f.ops = append(f.ops, &yamlSplice{start: start, end: next, seq: len(f.ops)})
}

// offset is the byte offset of n's first character in src, -1 when unknown.
func (f *yamlFile) offset(n *kyaml.Node) int {
	if n.Line <= 0 || n.Line > len(f.lines) || n.Column <= 0 {
		return -1
	}
	off := f.lines[n.Line-1]
	for c := 1; c < n.Column; c++ {
		if off >= len(f.src) || f.src[off] == '\n' {
			return -1
		}
		_, w := utf8.DecodeRune(f.src[off:])
		off += w
	}
	return off
}

// extent finds the bytes of the one-line scalar n in src: [start, end). ok is
// false when the scalar is not one that can be spliced (a block scalar, a plain
// scalar over several lines, one with a tag or an anchor).
func (f *yamlFile) extent(n *kyaml.Node) (start, end int, ok bool) {
	start = f.offset(n)
	if start < 0 || n.Kind != kyaml.ScalarNode || n.Anchor != "" {
		return 0, 0, false
	}
	lineEnd := len(f.src)
	if i := bytes.IndexByte(f.src[start:], '\n'); i >= 0 {
		lineEnd = start + i
	}
	line := f.src[start:lineEnd]
	line = bytes.TrimSuffix(line, []byte("\r"))
	switch {
	case n.Style == kyaml.DoubleQuotedStyle:
		if len(line) == 0 || line[0] != '"' {
			return 0, 0, false
		}
		for i := 1; i < len(line); i++ {
			switch line[i] {
			case '\\':
				i++
			case '"':
				return start, start + i + 1, true
			}
		}
	case n.Style == kyaml.SingleQuotedStyle:
		if len(line) == 0 || line[0] != '\'' {
			return 0, 0, false
		}
		for i := 1; i < len(line); i++ {
			if line[i] == '\'' {
				if i+1 < len(line) && line[i+1] == '\'' {
					i++
					continue
				}
				return start, start + i + 1, true
			}
		}
	case n.Style == 0:
		raw := string(line)
		if i := strings.Index(raw, " #"); i >= 0 {
			raw = raw[:i]
		}
		if i := strings.Index(raw, "\t#"); i >= 0 {
			raw = raw[:i]
		}
		if raw = strings.TrimRight(raw, " \t"); raw == n.Value && raw != "" {
			return start, start + len(raw), true
		}
		// in a flow collection: the scalar ends before , ] or }
		raw = string(line)
		if i := strings.IndexAny(raw, ",]}"); i >= 0 {
			if raw = strings.TrimRight(raw[:i], " \t"); raw == n.Value && raw != "" {
				return start, start + len(raw), true
			}
		}
	}
	return 0, 0, false
}

// renderScalar spells value as a one-line YAML string scalar in style (0 for
// plain when possible); ok is false when it takes more than one line.
func renderScalar(value string, style kyaml.Style) (text string, used kyaml.Style, ok bool) {
	n := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: value, Style: style}
	if n.Style == 0 && kyaml.IsYaml1_1NonString(n) {
		n.Style = kyaml.DoubleQuotedStyle
	}
	out, err := kyaml.Marshal(n)
	if err != nil {
		return "", n.Style, false
	}
	text = strings.TrimSuffix(string(out), "\n")
	return text, n.Style, !strings.ContainsAny(text, "\n\r")
}

// newStringNode is a new string scalar, quoted when it would not read back as one.
func newStringNode(value string) *kyaml.Node {
	_, style, _ := renderScalar(value, 0)
	return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: value, Style: style}
}

func newMappingNode() *kyaml.Node {
	return &kyaml.Node{Kind: kyaml.MappingNode, Tag: "!!map"}
}
