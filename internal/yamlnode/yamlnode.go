// Package yamlnode says what a YAML node is, for the messages that name a value
// of the wrong kind, and whether it is null (no node, an empty one, or a null
// scalar), which readers treat as absent.
//
// The nodes are kyaml's (sigs.k8s.io/kustomize/kyaml/yaml.Node, an alias of
// go.yaml.in/yaml/v3's Node), as render and pin read them. plugin reads its
// policy file with gopkg.in/yaml.v3, a different Node type, and words its
// messages otherwise; it keeps its own.
package yamlnode

import (
	"fmt"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// IsNull reports whether n is no value: nil, a node of no kind, or a null scalar
// (null, ~, or nothing after the key).
func IsNull(n *kyaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == kyaml.ScalarNode && n.ShortTag() == "!!null")
}

// Noun names what n is, for "is a %s" messages: "mapping", "list", "string",
// "number", "boolean", "null", "scalar" (a scalar of any other tag), "alias",
// "document", or "empty node" (a node of no kind).
func Noun(n *kyaml.Node) string {
	switch n.Kind {
	case kyaml.DocumentNode:
		return "document"
	case kyaml.SequenceNode:
		return "list"
	case kyaml.MappingNode:
		return "mapping"
	case kyaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "string"
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "boolean"
		case "!!null":
			return "null"
		}
		return "scalar"
	case kyaml.AliasNode:
		return "alias"
	}
	return "empty node"
}

// Describe names what n is with its value, for "is %s" messages: "a mapping",
// "a list", `the string "x"`, "the number 1.1", "the boolean true", "null",
// "the scalar v" (any other tag), "a YAML alias", "a document", or "empty".
func Describe(n *kyaml.Node) string {
	switch noun := Noun(n); noun {
	case "string":
		return fmt.Sprintf("the string %q", n.Value)
	case "number", "boolean", "scalar":
		return "the " + noun + " " + n.Value
	case "null":
		return "null"
	case "alias":
		return "a YAML alias"
	case "empty node":
		return "empty"
	default: // document, list, mapping
		return "a " + noun
	}
}
