package render

import (
	"fmt"
	"io"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Write prints objs as a YAML stream, documents separated by "---". The output
// depends only on the nodes: keys, comments and styles as rendered, two-space indent,
// list items at their parent's indentation (as kubectl and kustomize print). It is
// written object by object: what it holds at once is one object's text.
func Write(w io.Writer, objs []*kyaml.RNode) error {
	first := true
	for i, obj := range objs {
		if obj == nil || obj.YNode() == nil {
			continue
		}
		s, err := kyaml.String(obj.YNode())
		if err != nil {
			return fmt.Errorf("encode object %d (%s): %w", i+1, objectRef(obj), err)
		}
		if !first {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		first = false
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
	}
	return nil
}
