package pin

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// bytes is the edited file: content unchanged when nothing changed, the spliced
// original when that reads back as the edited tree, else the tree encoded.
func (f *yamlFile) bytes() ([]byte, error) {
	if !f.changed {
		return f.src, nil
	}
	want, err := f.encode(f.doc)
	if err != nil {
		return nil, err
	}
	if !f.structural {
		out := f.spliced()
		if g, err := parseYAMLFile(f.name, out); err == nil {
			if got, err := f.encode(g.doc); err == nil && bytes.Equal(got, want) {
				return out, nil
			}
		}
	}
	if len(f.src) > 0 {
		// The tree as encoded loses blank lines; put them back where that
		// changes nothing.
		out := restoreBlankLines(f.src, want)
		if g, err := parseYAMLFile(f.name, out); err == nil {
			if got, err := f.encode(g.doc); err == nil && bytes.Equal(got, want) {
				want = out
			}
		}
	}
	switch {
	case onlyComments(f.src):
		// A document of comments alone parses as nothing: keep them on top.
		want = append(append(bytes.TrimRight(slices.Clone(f.src), " \t\r\n"), '\n'), want...)
	case bytes.HasPrefix(f.src, []byte("---\n")) || bytes.HasPrefix(f.src, []byte("---\r\n")):
		want = append([]byte("---\n"), want...)
	}
	if n := bytes.Count(f.src, []byte("\n")); n > 0 && bytes.Count(f.src, []byte("\r\n")) == n {
		want = bytes.ReplaceAll(want, []byte("\n"), []byte("\r\n"))
	}
	return want, nil
}

// onlyComments reports whether src has comment lines and nothing else but
// blank lines and document markers.
func onlyComments(src []byte) bool {
	comment := false
	for _, l := range strings.Split(string(src), "\n") {
		switch t := strings.TrimSpace(l); {
		case strings.HasPrefix(t, "#"):
			comment = true
		case t != "" && t != "---":
			return false
		}
	}
	return comment
}

func (f *yamlFile) spliced() []byte {
	ops := slices.Clone(f.ops)
	slices.SortStableFunc(ops, func(a, b *yamlSplice) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return a.seq - b.seq
	})
	var out []byte
	pos := 0
	for _, op := range ops {
		if op.start < pos {
			// overlapping splices cannot happen (each node is replaced once,
			// insertions are at line starts); be safe all the same.
			return nil
		}
		out = append(out, f.src[pos:op.start]...)
		out = append(out, op.text...)
		pos = op.end
	}
	return append(out, f.src[pos:]...)
}

// encode writes doc as kyaml does, with the file's indentation.
func (f *yamlFile) encode(doc *kyaml.Node) ([]byte, error) {
	var b bytes.Buffer
	e := kyaml.NewEncoder(&b)
	e.SetIndent(f.indent)
	if f.wide {
		e.DefaultSeqIndent()
	} else {
		e.CompactSeqIndent()
	}
	if err := e.Encode(doc); err != nil {
		return nil, fmt.Errorf("file %s: encode: %w", f.name, err)
	}
	if err := e.Close(); err != nil {
		return nil, fmt.Errorf("file %s: encode: %w", f.name, err)
	}
	return b.Bytes(), nil
}

// yamlLayout finds how the file is indented: the indentation of its first
// nested block mapping (2 when none, or an odd one), and whether the items of
// its first block list under a key are indented (kyaml's guess when there is
// none).
func yamlLayout(doc *kyaml.Node, src string) (indent int, wide bool) {
	indent, wide = 0, kyaml.DeriveSeqIndentStyle(src) == string(kyaml.WideSequenceStyle)
	seqFound := false
	stack := []*kyaml.Node{doc}
	for steps := 0; len(stack) > 0 && steps < 100000 && (indent == 0 || !seqFound); steps++ {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.Style&kyaml.FlowStyle != 0 {
			continue
		}
		if n.Kind == kyaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				switch {
				case v.Style&kyaml.FlowStyle != 0 || len(v.Content) == 0 || v.Line <= k.Line:
				case v.Kind == kyaml.MappingNode && indent == 0:
					if d := v.Column - k.Column; d >= 2 && d <= 8 {
						indent = d
					}
				case v.Kind == kyaml.SequenceNode && !seqFound:
					seqFound, wide = true, v.Column > k.Column
				}
			}
		}
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, n.Content[i])
		}
	}
	if indent == 0 {
		indent = kyaml.DefaultIndent
	}
	return indent, wide
}

// restoreBlankLines puts back into out, the encoded tree, the blank lines src
// had before the lines out still has: an encoder drops them. Lines are matched
// by their text without indentation, in order.
func restoreBlankLines(src, out []byte) []byte {
	type line struct {
		text   string
		blanks int
	}
	var orig []line
	blanks := 0
	for _, l := range strings.Split(string(src), "\n") {
		t := strings.TrimSpace(l)
		if t == "" {
			blanks++
			continue
		}
		orig = append(orig, line{t, blanks})
		blanks = 0
	}
	const window = 64
	var b strings.Builder
	j := 0
	for i, l := range strings.SplitAfter(string(out), "\n") {
		if t := strings.TrimSpace(l); t != "" {
			for k := j; k < len(orig) && k < j+window; k++ {
				if orig[k].text == t {
					if i > 0 {
						b.WriteString(strings.Repeat("\n", orig[k].blanks))
					}
					j = k + 1
					break
				}
			}
		}
		b.WriteString(l)
	}
	return []byte(b.String())
}
