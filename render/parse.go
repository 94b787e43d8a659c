package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// parseYAML splits a multi-document YAML stream into objects. source names the file
// (or the tool output) in errors; documents are counted from 1. Empty documents
// (nothing, only comments, null) are dropped; a document that does not parse, or is
// not a mapping with a kind, is an error.
func parseYAML(source string, data []byte) ([]*kyaml.RNode, error) {
	dec := kyaml.NewDecoder(bytes.NewReader(data))
	var out []*kyaml.RNode
	for doc := 1; ; doc++ {
		var n kyaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		objs, err := documentObjects(&n)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		out = append(out, objs...)
	}
}

// documentObjects validates one decoded document and flattens List kinds.
func documentObjects(n *kyaml.Node) ([]*kyaml.RNode, error) {
	if n.Kind == kyaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil
		}
		n = n.Content[0]
	}
	if yamlnode.IsNull(n) {
		return nil, nil
	}
	obj, err := object(n)
	if err != nil {
		return nil, err
	}
	items, isList, err := listItems(obj)
	if err != nil {
		return nil, err
	}
	if !isList {
		return []*kyaml.RNode{obj}, nil
	}
	var out []*kyaml.RNode
	for i, it := range items {
		if yamlnode.IsNull(it) {
			continue
		}
		o, err := object(it)
		if err != nil {
			return nil, fmt.Errorf("%s item %d: %w", obj.GetKind(), i, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// object checks that n is a Kubernetes object: a mapping with a string kind.
func object(n *kyaml.Node) (*kyaml.RNode, error) {
	if n.Kind != kyaml.MappingNode {
		return nil, fmt.Errorf("not a Kubernetes object: a %s, not a mapping", yamlnode.Noun(n))
	}
	rn := kyaml.NewRNode(n)
	k := rn.Field("kind")
	if k == nil || k.Value.YNode().Kind != kyaml.ScalarNode || k.Value.YNode().Value == "" {
		return nil, errors.New("not a Kubernetes object: kind is missing")
	}
	return rn, nil
}

// listItems reports whether obj is a list to flatten, as Argo CD flattens kind List
// (and any *List kind) with an items sequence; items: null makes an empty list.
func listItems(obj *kyaml.RNode) ([]*kyaml.Node, bool, error) {
	if !strings.HasSuffix(obj.GetKind(), "List") {
		return nil, false, nil
	}
	f := obj.Field("items")
	if f == nil {
		return nil, false, nil
	}
	v := f.Value.YNode()
	switch {
	case yamlnode.IsNull(v):
		return nil, true, nil
	case v.Kind == kyaml.SequenceNode:
		return v.Content, true, nil
	}
	return nil, false, fmt.Errorf("%s: items is a %s, not a list", obj.GetKind(), yamlnode.Noun(v))
}

// jsonNode reads the next JSON value from dec as a YAML node.
func jsonNode(dec *json.Decoder) (*kyaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	return jsonValue(dec, tok, 0)
}

const maxJSONDepth = 10000

func jsonValue(dec *json.Decoder, tok json.Token, depth int) (*kyaml.Node, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &kyaml.Node{Kind: kyaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", kt)
				}
				vt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := jsonValue(dec, vt, depth+1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, jsonString(key), v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &kyaml.Node{Kind: kyaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				vt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := jsonValue(dec, vt, depth+1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return n, nil
		}
		return nil, fmt.Errorf("unexpected %q", t)
	case string:
		return jsonString(t), nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t)}, nil
	case nil:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// jsonString makes a string scalar that reads back as a string under YAML 1.1 too
// (Argo CD parses with YAML 1.1 rules, where yes, on and 0777 are not strings).
func jsonString(s string) *kyaml.Node {
	n := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: s}
	if kyaml.IsYaml1_1NonString(n) {
		n.Style = kyaml.DoubleQuotedStyle
	}
	return n
}
