package migrate

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/argoglob"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
)

// helmKeysLost are the Helm source settings the plugin's Helm render has no
// parameter for, with why.
var helmKeysLost = map[string]string{
	"releaseName":             "the plugin's release name is the Application's name",
	"fileParameters":          "the plugin takes values files (values-files) and --set parameters (helm-parameters), not --set-file",
	"passCredentials":         "the plugin renders vendored chart dependencies only",
	"ignoreMissingValueFiles": "a values file named in values-files must exist",
	"skipCrds":                "the plugin renders the chart's CRDs as helm template does",
	"skipSchemaValidation":    "the plugin validates values against the chart's schema as helm template does",
	"skipTests":               "no counterpart in the plugin's Helm render",
	"version":                 "the plugin renders with its own Helm (v3)",
	"namespace":               "the plugin's namespace is the Application's destination namespace",
	"kubeVersion":             "the plugin uses the cluster version Argo CD passes (KUBE_VERSION)",
	"apiVersions":             "the plugin uses the API versions Argo CD passes (KUBE_API_VERSIONS)",
}

// rewriteApplication names the plugin in the Application's source, with params
// and the source's Helm settings, and removes argocd-image-updater's
// annotations. An Application whose source cannot name the plugin is left as it
// is, and the finding says why.
func rewriteApplication(a *application, params []param, c *converted, pluginName string) {
	root := a.d.root
	spec := mapGet(root, "spec")
	src := mapGet(spec, "source")
	switch {
	case src == nil && mapGet(spec, "sources") != nil:
		c.add(Lost, "spec.sources: a multi-source Application is left as it is; name the plugin in the source that holds the app (spec.sources[N].plugin) with the parameters below")
		c.findings = append(c.findings, paramsPreview(params)...)
		return
	case src == nil || src.Kind != yaml.MappingNode:
		c.add(Lost, "spec.source: the Application has no source to name the plugin in; left as it is")
		c.findings = append(c.findings, paramsPreview(params)...)
		return
	case mapGet(src, "chart") != nil:
		c.add(Lost, "spec.source.chart %q: a chart from a Helm repository is left as it is; the plugin renders a directory of the git repository (vendor the chart into git, with its dependencies, to move the app over)", mapString(src, "chart"))
		c.findings = append(c.findings, paramsPreview(params)...)
		return
	case mapGet(src, "plugin") != nil:
		c.add(Lost, "spec.source.plugin: the Application already names a plugin (%q); left as it is", mapString(mapGet(src, "plugin"), "name"))
		c.findings = append(c.findings, paramsPreview(params)...)
		return
	}

	var extra []param
	if h := mapGet(src, "helm"); h != nil && h.Kind == yaml.MappingNode {
		extra = helmParams(h, c)
	}
	if k := mapGet(src, "kustomize"); k != nil && k.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(k.Content); i += 2 {
			key := k.Content[i].Value
			why := "the plugin renders the overlay as kustomize build does, without Argo CD's overrides; put it in the overlay's kustomization.yaml"
			if key == "images" {
				why = "Argo CD's image overrides (argocd-image-updater's argocd write-back writes them): the resolver rewrites the images the policy names in the rendered output; a newName or an image no policy names is lost: put it in the overlay's kustomization.yaml images:"
			}
			c.add(Lost, "spec.source.kustomize.%s: %s", key, why)
		}
	}
	if d := mapGet(src, "directory"); d != nil && d.Kind == yaml.MappingNode {
		extra = append(extra, directoryParams(d, c)...)
	}
	for _, k := range []string{"helm", "kustomize", "directory"} {
		mapDelete(src, k)
	}
	all := append(slices.Clone(params), extra...)
	pl := &yaml.Node{Kind: yaml.MappingNode}
	mapSet(pl, "name", scalar(pluginName))
	if len(all) > 0 {
		mapSet(pl, "parameters", paramsNode(all))
	}
	mapSet(src, "plugin", pl)

	// argocd-image-updater's annotations: their content is in the parameters now.
	md := mapGet(root, "metadata")
	if ann := mapGet(md, "annotations"); ann != nil && ann.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(ann.Content); {
			if strings.HasPrefix(ann.Content[i].Value, AnnotationPrefix) {
				ann.Content = append(ann.Content[:i], ann.Content[i+2:]...)
				continue
			}
			i += 2
		}
		if len(ann.Content) == 0 {
			mapDelete(md, "annotations")
		}
	}
}

// helmParams carries the source's Helm settings over into the plugin's
// values-files, helm-parameters and values parameters.
func helmParams(h *yaml.Node, c *converted) []param {
	var out []param
	var files []string
	hp := map[string]string{}
	values := ""
	for i := 0; i+1 < len(h.Content); i += 2 {
		key, v := h.Content[i].Value, h.Content[i+1]
		switch key {
		case "valueFiles":
			for _, f := range v.Content {
				files = append(files, f.Value)
			}
		case "parameters":
			for j, p := range v.Content {
				name, val := mapString(p, "name"), mapString(p, "value")
				if name == "" {
					c.add(Lost, "spec.source.helm.parameters[%d]: no name", j)
					continue
				}
				hp[name] = val
				if mapString(p, "forceString") == "true" {
					c.add(Note, "spec.source.helm.parameters[%d] (%s): forceString: helm-parameters are passed as --set; quote the value in values if it must stay a string", j, name)
				}
			}
		case "values":
			if values == "" {
				values = v.Value
			}
		case "valuesObject":
			var b strings.Builder
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			if err := enc.Encode(v); err == nil && enc.Close() == nil {
				if values != "" {
					c.add(Note, "spec.source.helm: values and valuesObject both set; valuesObject is used, as Argo CD does")
				}
				values = b.String()
			}
		default:
			why, ok := helmKeysLost[key]
			if !ok {
				why = "no counterpart in the plugin's parameters"
			}
			c.add(Lost, "spec.source.helm.%s: %s", key, why)
		}
	}
	if len(files) > 0 {
		out = append(out, param{name: plugin.ParamValuesFiles, kind: plugin.KindArray, array: files})
	}
	if len(hp) > 0 {
		out = append(out, param{name: plugin.ParamHelmParameters, kind: plugin.KindMap, mp: hp})
	}
	if values != "" {
		out = append(out, param{name: plugin.ParamValues, kind: plugin.KindString, str: values})
	}
	return out
}

// directoryKeysLost are the directory source settings the plugin has no parameter
// for, with why; each is lost only when set (not false, not empty).
var directoryKeysLost = map[string]string{
	"jsonnet":                "the plugin does not evaluate Jsonnet: a .jsonnet file of the directory is refused (leave it out with directory-exclude)",
	"disableExtensionFilter": "the plugin reads only *.yaml, *.yml and *.json files (and refuses *.jsonnet), whatever the include pattern",
}

// directoryParams carries the source's directory options over into the plugin's
// directory-recurse, directory-include and directory-exclude parameters.
func directoryParams(d *yaml.Node, c *converted) []param {
	var out []param
	for i := 0; i+1 < len(d.Content); i += 2 {
		key, v := d.Content[i].Value, d.Content[i+1]
		switch key {
		case "recurse":
			var b bool
			if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
				c.add(Lost, "spec.source.directory.recurse %q: not true or false", v.Value)
			} else if b {
				out = append(out, param{name: plugin.ParamDirectoryRecurse, kind: plugin.KindString, str: "true"})
			}
		case "include", "exclude":
			if p, ok := directoryGlobParam(key, v, c); ok {
				out = append(out, p)
			}
		default:
			if isSet(v) {
				why, ok := directoryKeysLost[key]
				if !ok {
					why = "no counterpart in the plugin's parameters"
				}
				c.add(Lost, "spec.source.directory.%s: %s", key, why)
			}
		}
	}
	return out
}

// directoryGlobParam is directory.include or .exclude as the plugin's
// directory-include or directory-exclude; an empty pattern is none, and one that
// does not compile is lost (Argo CD 3.6 matches nothing with it, the plugin refuses
// it).
func directoryGlobParam(key string, v *yaml.Node, c *converted) (param, bool) {
	name := plugin.ParamDirectoryInclude
	if key == "exclude" {
		name = plugin.ParamDirectoryExclude
	}
	if v.Kind != yaml.ScalarNode {
		c.add(Lost, "spec.source.directory.%s: not a string", key)
		return param{}, false
	}
	if v.Value == "" {
		return param{}, false
	}
	if _, err := argoglob.Compile(v.Value); err != nil {
		c.add(Lost, "spec.source.directory.%s %q: %v; Argo CD 3.6 matches nothing with it and parameter %s refuses it: write the pattern anew", key, v.Value, err, name)
		return param{}, false
	}
	return param{name: name, kind: plugin.KindString, str: v.Value}, true
}

// isSet reports whether v sets something: not null, false, empty or an empty
// mapping or list.
func isSet(v *yaml.Node) bool {
	switch v.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		return len(v.Content) > 0
	case yaml.ScalarNode:
		return v.Tag != "!!null" && v.Value != "" && v.Value != "false"
	}
	return true
}

// paramsNode is the parameters list of spec.source.plugin.
func paramsNode(ps []param) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, p := range ps {
		m := &yaml.Node{Kind: yaml.MappingNode}
		mapSet(m, "name", scalar(p.name))
		switch p.kind {
		case plugin.KindArray:
			a := &yaml.Node{Kind: yaml.SequenceNode}
			for _, v := range p.array {
				a.Content = append(a.Content, scalar(v))
			}
			mapSet(m, "array", a)
		case plugin.KindMap:
			mm := &yaml.Node{Kind: yaml.MappingNode}
			for _, k := range sortedKeys(p.mp) {
				mapSet(mm, k, scalar(p.mp[k]))
			}
			mapSet(m, "map", mm)
		default:
			v := scalar(p.str)
			if strings.Contains(p.str, "\n") {
				v.Style = yaml.LiteralStyle
			}
			mapSet(m, "string", v)
		}
		seq.Content = append(seq.Content, m)
	}
	return seq
}

// paramsPreview lists the parameters an Application left as it is would take.
func paramsPreview(ps []param) []Finding {
	if len(ps) == 0 {
		return nil
	}
	var parts []string
	for _, p := range ps {
		switch p.kind {
		case plugin.KindArray:
			parts = append(parts, fmt.Sprintf("%s=%q", p.name, p.array))
		case plugin.KindMap:
			parts = append(parts, fmt.Sprintf("%s=%v", p.name, p.mp))
		default:
			parts = append(parts, fmt.Sprintf("%s=%q", p.name, p.str))
		}
	}
	return []Finding{{Note, "the plugin parameters it would take: " + strings.Join(parts, "; ")}}
}
