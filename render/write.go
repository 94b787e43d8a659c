package render

import (
	"bytes"
	"fmt"
	"io"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Write prints objs as a YAML stream, documents separated by "---". The output
// depends only on the nodes: keys, comments and styles as rendered, two-space indent,
// list items at their parent's indentation (as kubectl and kustomize print).
func Write(w io.Writer, objs []*kyaml.RNode) error {
	var b bytes.Buffer
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
			b.WriteString("---\n")
		}
		first = false
		b.WriteString(s)
	}
	_, err := w.Write(b.Bytes())
	return err
}
