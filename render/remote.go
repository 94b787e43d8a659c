package render

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// looksRemote reports whether kustomize would treat ref as a remote resource or
// base: an HTTP(S) URL it fetches, or a git URL it clones with the git program
// (kustomize's own rules: a scheme, the go-getter "git::" prefix, an scp-style
// user@host:path, a github.com/ path). It errs on the side of remote.
func looksRemote(ref string) bool {
	ref = strings.TrimSpace(ref)
	if ref == "" || strings.ContainsAny(ref, "\n") {
		return false // empty, or inline YAML (generators, transformers)
	}
	l := strings.ToLower(ref)
	if strings.HasPrefix(l, "git::") || strings.Contains(l, "://") ||
		strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "github.com:") ||
		scpUser.MatchString(ref) {
		return true
	}
	if u, err := url.Parse(ref); err == nil {
		switch strings.ToLower(u.Scheme) {
		case "http", "https", "ssh", "file", "git":
			return true
		}
	}
	return false
}

var scpUser = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// kustomizationPathLists are the kustomization fields that list paths kustomize
// loads (files, directories, or git and HTTP URLs).
var kustomizationPathLists = []string{"resources", "bases", "components", "crds", "configurations",
	"patchesStrategicMerge", "generators", "transformers", "validators"}

// remoteInKustomization refuses a kustomization (file name) that refers to a remote
// resource, base, component, patch, generator input or OpenAPI schema.
func remoteInKustomization(name string, data []byte) error {
	rn, err := kyaml.Parse(string(data))
	if err != nil || rn.YNode().Kind != kyaml.MappingNode {
		return nil // kustomize reports it
	}
	check := func(field, ref string) error {
		if looksRemote(ref) {
			return fmt.Errorf("%s: %s entry %q: %w (git or HTTP URLs: no network and no git in the sidecar); vendor it into the repository and refer to it by a relative path", name, field, ref, ErrRemote)
		}
		return nil
	}
	for _, field := range kustomizationPathLists {
		for _, ref := range scalars(rn.Field(field)) {
			if err := check(field, ref); err != nil {
				return err
			}
		}
	}
	for _, field := range []string{"patches", "patchesJson6902", "replacements"} {
		for _, item := range items(rn.Field(field)) {
			for _, ref := range scalars(item.Field("path")) {
				if err := check(field+".path", ref); err != nil {
					return err
				}
			}
		}
	}
	if o := rn.Field("openapi"); o != nil && o.Value.YNode().Kind == kyaml.MappingNode {
		for _, ref := range scalars(o.Value.Field("path")) {
			if err := check("openapi.path", ref); err != nil {
				return err
			}
		}
	}
	for _, field := range []string{"configMapGenerator", "secretGenerator"} {
		for _, item := range items(rn.Field(field)) {
			if err := generatorInputs(field, item, check); err != nil {
				return err
			}
		}
	}
	return nil
}

func generatorInputs(field string, item *kyaml.RNode, check func(field, ref string) error) error {
	for _, k := range []string{"files", "envs", "env"} {
		for _, ref := range scalars(item.Field(k)) {
			if _, p, ok := strings.Cut(ref, "="); ok && k == "files" {
				ref = p
			}
			if err := check(field+"."+k, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// pluginConfigKinds are kustomize's built-in generators and transformers whose
// configuration, in a file listed under generators or transformers, names files to
// load.
var pluginConfigKinds = []string{"PatchTransformer", "PatchJson6902Transformer", "PatchStrategicMergeTransformer",
	"ReplacementTransformer", "ConfigMapGenerator", "SecretGenerator"}

// remoteInPluginConfig refuses a built-in plugin configuration (file name) that
// refers to a remote file.
func remoteInPluginConfig(name string, data []byte) error {
	hit := false
	for _, k := range pluginConfigKinds {
		if bytes.Contains(data, []byte(k)) {
			hit = true
			break
		}
	}
	if !hit {
		return nil
	}
	docs := parseYAMLDocs(data)
	check := func(field, ref string) error {
		if looksRemote(ref) {
			return fmt.Errorf("%s: %s entry %q: %w (git or HTTP URLs: no network and no git in the sidecar); vendor it into the repository and refer to it by a relative path", name, field, ref, ErrRemote)
		}
		return nil
	}
	for _, d := range docs {
		if d.YNode().Kind != kyaml.MappingNode {
			continue
		}
		kind := d.GetKind()
		known := false
		for _, k := range pluginConfigKinds {
			known = known || k == kind
		}
		if !known {
			continue
		}
		for _, k := range []string{"path", "paths"} {
			for _, ref := range scalars(d.Field(k)) {
				if err := check(kind+"."+k, ref); err != nil {
					return err
				}
			}
		}
		for _, item := range items(d.Field("replacements")) {
			for _, ref := range scalars(item.Field("path")) {
				if err := check(kind+".replacements.path", ref); err != nil {
					return err
				}
			}
		}
		if err := generatorInputs(kind, d, check); err != nil {
			return err
		}
	}
	return nil
}

// parseYAMLDocs parses a multi-document stream into nodes, without judging them; it
// stops at the first document that does not parse (kustomize reports it).
func parseYAMLDocs(data []byte) []*kyaml.RNode {
	dec := kyaml.NewDecoder(bytes.NewReader(data))
	var out []*kyaml.RNode
	for {
		var n kyaml.Node
		if err := dec.Decode(&n); err != nil {
			return out
		}
		if len(n.Content) == 1 {
			out = append(out, kyaml.NewRNode(n.Content[0]))
		}
	}
}

// scalars are the string values of a field: the scalar itself or the scalars of a
// sequence.
func scalars(f *kyaml.MapNode) []string {
	if f == nil || f.Value == nil {
		return nil
	}
	n := deref(f.Value.YNode())
	switch n.Kind {
	case kyaml.ScalarNode:
		return []string{n.Value}
	case kyaml.SequenceNode:
		var out []string
		for _, it := range n.Content {
			if it = deref(it); it.Kind == kyaml.ScalarNode {
				out = append(out, it.Value)
			}
		}
		return out
	}
	return nil
}

// items are the mappings of a sequence field.
func items(f *kyaml.MapNode) []*kyaml.RNode {
	if f == nil || f.Value == nil {
		return nil
	}
	n := deref(f.Value.YNode())
	if n.Kind != kyaml.SequenceNode {
		return nil
	}
	var out []*kyaml.RNode
	for _, it := range n.Content {
		if it = deref(it); it.Kind == kyaml.MappingNode {
			out = append(out, kyaml.NewRNode(it))
		}
	}
	return out
}
