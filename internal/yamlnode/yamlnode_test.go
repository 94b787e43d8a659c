package yamlnode_test

import (
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

func TestNounAndDescribe(t *testing.T) {
	doc := func(src string) *kyaml.Node {
		t.Helper()
		var n kyaml.Node
		if err := kyaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		return n.Content[0]
	}
	for _, c := range []struct {
		name       string
		n          *kyaml.Node
		null       bool
		noun, desc string
	}{
		{"mapping", doc("a: 1"), false, "mapping", "a mapping"},
		{"list", doc("[1]"), false, "list", "a list"},
		{"string", doc(`"x y"`), false, "string", `the string "x y"`},
		{"int", doc("1"), false, "number", "the number 1"},
		{"float", doc("1.10"), false, "number", "the number 1.10"},
		{"boolean", doc("true"), false, "boolean", "the boolean true"},
		{"null", doc("~"), true, "null", "null"},
		{"other tag", doc("!!binary aGk="), false, "scalar", "the scalar aGk="},
		{"alias", &kyaml.Node{Kind: kyaml.AliasNode}, false, "alias", "a YAML alias"},
		{"document", &kyaml.Node{Kind: kyaml.DocumentNode}, false, "document", "a document"},
		{"no kind", &kyaml.Node{}, true, "empty node", "empty"},
	} {
		if got := yamlnode.IsNull(c.n); got != c.null {
			t.Errorf("%s: IsNull = %v, want %v", c.name, got, c.null)
		}
		if got := yamlnode.Noun(c.n); got != c.noun {
			t.Errorf("%s: Noun = %q, want %q", c.name, got, c.noun)
		}
		if got := yamlnode.Describe(c.n); got != c.desc {
			t.Errorf("%s: Describe = %q, want %q", c.name, got, c.desc)
		}
	}
	if !yamlnode.IsNull(nil) {
		t.Errorf("IsNull(nil) = false")
	}
}
