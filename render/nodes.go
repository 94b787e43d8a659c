package render

import (
	"strconv"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Helpers over raw yaml nodes. They take and return *kyaml.Node rather than RNodes
// because image fields are edited in place and may be reached through aliases, which
// RNode lookups do not follow.

// deref follows YAML aliases (bounded, in case of a cycle).
func deref(n *kyaml.Node) *kyaml.Node {
	for i := 0; n != nil && n.Kind == kyaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// fieldNode returns the value node of key in mapping n (not dereferenced), or nil.
func fieldNode(n *kyaml.Node, key string) *kyaml.Node {
	n = deref(n)
	if n == nil || n.Kind != kyaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := deref(n.Content[i]); k != nil && k.Kind == kyaml.ScalarNode && k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// field returns the dereferenced value of key in mapping n, or nil.
func field(n *kyaml.Node, key string) *kyaml.Node { return deref(fieldNode(n, key)) }

func scalarValue(n *kyaml.Node) string {
	if n == nil || n.Kind != kyaml.ScalarNode || n.ShortTag() == "!!null" {
		return ""
	}
	return n.Value
}

// itemKey names a list item by its name field, else by its index.
func itemKey(n *kyaml.Node, i int) string {
	if name := scalarValue(field(n, "name")); name != "" {
		return name
	}
	return strconv.Itoa(i)
}
