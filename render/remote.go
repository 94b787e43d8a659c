package render

import (
	"bytes"
	"errors"
	"io"
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

// remoteRole says how kustomize loads an entry, and so what a remote one may be.
type remoteRole int

const (
	roleFile     remoteRole = iota // read as a file: an HTTP(S) URL is fetched
	roleResource                   // a file, else a base (directory or git repository)
	roleBase                       // a directory or git repository
)

// pathRef is one entry of a kustomization or plugin configuration naming a path.
type pathRef struct {
	field string      // e.g. "resources", "configMapGenerator.files"
	node  *kyaml.Node // the scalar, rewritten when a remote entry is fetched
	key   string      // a generator's "key=" before the path, kept on rewrite
	ref   string      // the path or URL
	role  remoteRole
}

// kustomizationRefs are the entries of a kustomization that name paths kustomize
// loads: resources, bases, components, patches, generator inputs, OpenAPI schemas.
func kustomizationRefs(rn *kyaml.RNode) []pathRef {
	var out []pathRef
	for _, field := range kustomizationPathLists {
		role := roleFile
		switch field {
		case "resources":
			role = roleResource
		case "bases", "components":
			role = roleBase
		}
		for _, n := range scalars(rn.Field(field)) {
			out = append(out, pathRef{field: field, node: n, ref: n.Value, role: role})
		}
	}
	for _, field := range []string{"patches", "patchesJson6902", "replacements"} {
		for _, item := range items(rn.Field(field)) {
			out = append(out, fileRefs(field+".path", scalars(item.Field("path")))...)
		}
	}
	if o := rn.Field("openapi"); o != nil && o.Value.YNode().Kind == kyaml.MappingNode {
		out = append(out, fileRefs("openapi.path", scalars(o.Value.Field("path")))...)
	}
	for _, field := range []string{"configMapGenerator", "secretGenerator"} {
		for _, item := range items(rn.Field(field)) {
			out = append(out, generatorRefs(field, item)...)
		}
	}
	return out
}

func fileRefs(field string, nodes []*kyaml.Node) []pathRef {
	var out []pathRef
	for _, n := range nodes {
		out = append(out, pathRef{field: field, node: n, ref: n.Value, role: roleFile})
	}
	return out
}

// generatorRefs are a generator's input files ("files" entries may be key=path).
func generatorRefs(field string, item *kyaml.RNode) []pathRef {
	var out []pathRef
	for _, k := range []string{"files", "envs", "env"} {
		for _, n := range scalars(item.Field(k)) {
			r := pathRef{field: field + "." + k, node: n, ref: n.Value, role: roleFile}
			if key, p, ok := strings.Cut(n.Value, "="); ok && k == "files" {
				r.key, r.ref = key+"=", p
			}
			out = append(out, r)
		}
	}
	return out
}

// pluginConfigKinds are kustomize's built-in generators and transformers whose
// configuration, in a file listed under generators or transformers, names files to
// load.
var pluginConfigKinds = []string{"PatchTransformer", "PatchJson6902Transformer", "PatchStrategicMergeTransformer",
	"ReplacementTransformer", "ConfigMapGenerator", "SecretGenerator"}

// mayBePluginConfig is a cheap test before parsing a file as plugin configurations.
func mayBePluginConfig(data []byte) bool {
	for _, k := range pluginConfigKinds {
		if bytes.Contains(data, []byte(k)) {
			return true
		}
	}
	return false
}

// pluginConfigRefs are the files named by the built-in plugin configurations in
// docs.
func pluginConfigRefs(docs []*kyaml.RNode) []pathRef {
	var out []pathRef
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
			out = append(out, fileRefs(kind+"."+k, scalars(d.Field(k)))...)
		}
		for _, item := range items(d.Field("replacements")) {
			out = append(out, fileRefs(kind+".replacements.path", scalars(item.Field("path")))...)
		}
		out = append(out, generatorRefs(kind, d)...)
	}
	return out
}

// parseYAMLDocs parses a multi-document stream into nodes, without judging them; it
// stops at the first document that does not parse (kustomize reports it), and
// then complete is false.
func parseYAMLDocs(data []byte) (docs []*kyaml.RNode, complete bool) {
	dec := kyaml.NewDecoder(bytes.NewReader(data))
	var out []*kyaml.RNode
	for {
		var n kyaml.Node
		if err := dec.Decode(&n); err != nil {
			return out, errors.Is(err, io.EOF)
		}
		if len(n.Content) == 1 {
			out = append(out, kyaml.NewRNode(n.Content[0]))
		}
	}
}

// scalars are the string nodes of a field: the scalar itself or the scalars of a
// sequence.
func scalars(f *kyaml.MapNode) []*kyaml.Node {
	if f == nil || f.Value == nil {
		return nil
	}
	n := deref(f.Value.YNode())
	switch n.Kind {
	case kyaml.ScalarNode:
		return []*kyaml.Node{n}
	case kyaml.SequenceNode:
		var out []*kyaml.Node
		for _, it := range n.Content {
			if it = deref(it); it.Kind == kyaml.ScalarNode {
				out = append(out, it)
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
