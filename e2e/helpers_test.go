package e2e

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// objects are rendered manifests.
type objects []*unstructured.Unstructured

// get returns the object "Kind/name"; "Kind/" means the only object of that kind.
func (o objects) get(t *testing.T, key string) *unstructured.Unstructured {
	t.Helper()
	kind, name, _ := strings.Cut(key, "/")
	var found []*unstructured.Unstructured
	for _, obj := range o {
		if obj.GetKind() == kind && (name == "" || obj.GetName() == name) {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		var have []string
		for _, obj := range o {
			have = append(have, obj.GetKind()+"/"+obj.GetName())
		}
		t.Fatalf("%d objects match %s; rendered: %v", len(found), key, have)
	}
	return found[0]
}

func equal(a, b []string) bool { return slices.Equal(a, b) }
