package render

import (
	"errors"
	"fmt"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// SetImage writes newRef into the image field u came from, in place; nothing else
// of the object changes. newRef must be an image reference; which one (normally the
// field's repository as written with a new tag or digest) is the caller's choice.
func SetImage(u ImageUse, newRef string) error {
	if u.node == nil {
		return errors.New("render.SetImage: the ImageUse does not come from FindImages")
	}
	if _, err := resolve.ParseImage(newRef); err != nil {
		return fmt.Errorf("%s: %s: %w", u.Object, u.Path, err)
	}
	n := u.node
	if n.Kind == kyaml.AliasNode {
		// Replace the alias by a plain value so the anchor's other users keep theirs.
		*n = kyaml.Node{Kind: kyaml.ScalarNode, Line: n.Line, Column: n.Column,
			HeadComment: n.HeadComment, LineComment: n.LineComment, FootComment: n.FootComment}
	}
	n.Tag = "!!str"
	n.Value = newRef
	switch n.Style {
	case kyaml.LiteralStyle, kyaml.FoldedStyle, kyaml.TaggedStyle:
		n.Style = 0
	}
	if n.Style == 0 && kyaml.IsYaml1_1NonString(n) {
		n.Style = kyaml.DoubleQuotedStyle
	}
	return nil
}

// Annotate sets metadata.annotations[key] = value on obj, creating the maps it needs.
func Annotate(obj *kyaml.RNode, key, value string) error {
	if obj == nil || obj.YNode() == nil || obj.YNode().Kind != kyaml.MappingNode {
		return errors.New("render.Annotate: not an object")
	}
	if key == "" {
		return errors.New("render.Annotate: empty annotation key")
	}
	return obj.PipeE(kyaml.SetAnnotation(key, value))
}
