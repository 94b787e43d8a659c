// Package plugin is the Argo CD side of the resolver: the environment a Config
// Management Plugin command runs in, the policy per image alias (from the policy file
// and the Application's plugin parameters), and the dynamic parameter announcement.
//
// It speaks to Argo CD only through the CMP contract (environment variables, stdout),
// never through Argo CD's Go packages.
package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/oneline"
)

// Environment variable names set by Argo CD for a CMP command (checked against
// reposerver/repository/repository.go and cmpserver/plugin/plugin.go, v2.14 and v3).
const (
	EnvAppName              = "ARGOCD_APP_NAME"
	EnvAppNamespace         = "ARGOCD_APP_NAMESPACE"
	EnvAppRevision          = "ARGOCD_APP_REVISION"
	EnvAppRevisionShort     = "ARGOCD_APP_REVISION_SHORT"
	EnvAppRevisionShort8    = "ARGOCD_APP_REVISION_SHORT_8"
	EnvAppSourceRepoURL     = "ARGOCD_APP_SOURCE_REPO_URL"
	EnvAppSourcePath        = "ARGOCD_APP_SOURCE_PATH"
	EnvAppSourceTargetRev   = "ARGOCD_APP_SOURCE_TARGET_REVISION"
	EnvKubeVersion          = "KUBE_VERSION"
	EnvKubeAPIVersions      = "KUBE_API_VERSIONS"
	EnvAppProjectName       = "ARGOCD_APP_PROJECT_NAME"
	EnvAppParameters        = "ARGOCD_APP_PARAMETERS"
	EnvVarPrefix            = "ARGOCD_ENV_"
	StreamedRevision        = "streamed"
	parametersAcceptedShape = `a JSON array of {"name": NAME, and exactly one of "string": "...", "array": ["..."], "map": {"k": "v"}} with unique names, or null`
)

// Env is the environment Argo CD gives a CMP command.
type Env struct {
	// AppName is ARGOCD_APP_NAME exactly as given: "name" for an Application in the
	// control-plane namespace, "namespace_name" for one outside it. Use it for identity.
	AppName string
	// AppShortName and AppControlNamespace split AppName: for "team-a_web" they are
	// "web" and "team-a"; for "web" they are "web" and "" (the control-plane
	// namespace, which the plugin is not told).
	AppShortName        string
	AppControlNamespace string
	// AppNamespace is ARGOCD_APP_NAMESPACE: the destination namespace.
	AppNamespace string
	// Revision is the resolved commit SHA (or "streamed", see Streamed); RevisionShort
	// its 7-character and RevisionShort8 its 8-character prefix.
	Revision, RevisionShort, RevisionShort8         string
	SourceRepoURL, SourcePath, SourceTargetRevision string
	// KubeVersion is the destination cluster's version (e.g. "v1.31.0").
	KubeVersion string
	// KubeAPIVersions lists the cluster's group/versions (KUBE_API_VERSIONS, comma
	// separated); nil when absent or empty.
	KubeAPIVersions []string
	// ProjectName is ARGOCD_APP_PROJECT_NAME (Argo CD v3 and later; empty before).
	ProjectName string
	// Vars holds the plugin env entries of the Application, ARGOCD_ENV_<NAME>, keyed by
	// NAME (the prefix removed).
	Vars map[string]string
	// Parameters are the Application's plugin parameters, from ARGOCD_APP_PARAMETERS
	// only. The PARAM_* variables are never read: their escaped names collide
	// ("a.b" and "a-b" both become PARAM_A_B).
	Parameters Parameters
	// Streamed is true when the sources were streamed from the client (argocd app diff
	// --local --server-side-generate): the revision is "streamed", not a commit, so
	// nothing may be keyed on it (pins, refresh bookkeeping).
	Streamed bool
}

// EnvFrom reads the CMP environment through lookup (os.LookupEnv in main).
//
// A lookup function cannot list variables, so the ARGOCD_ENV_* names for Vars are taken
// from os.Environ() and their values through lookup: exact when lookup is os.LookupEnv.
// Callers holding their own list of variables (tests, a child's cmd.Env) use
// EnvFromEnviron, which fills Vars from that list.
func EnvFrom(lookup func(string) (string, bool)) (*Env, error) {
	return envFrom(lookup, envNames(os.Environ()))
}

// EnvFromEnviron reads the CMP environment from a list of NAME=value entries, such as
// os.Environ(). When a name appears twice the last entry wins, as in exec.Cmd.
func EnvFromEnviron(environ []string) (*Env, error) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		m[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	return envFrom(lookup, envNames(environ))
}

func envNames(environ []string) []string {
	var names []string
	for _, kv := range environ {
		if k, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvVarPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func envFrom(lookup func(string) (string, bool), varNames []string) (*Env, error) {
	get := func(k string) string { v, _ := lookup(k); return v }
	e := &Env{
		AppName:              get(EnvAppName),
		AppNamespace:         get(EnvAppNamespace),
		Revision:             get(EnvAppRevision),
		RevisionShort:        get(EnvAppRevisionShort),
		RevisionShort8:       get(EnvAppRevisionShort8),
		SourceRepoURL:        get(EnvAppSourceRepoURL),
		SourcePath:           get(EnvAppSourcePath),
		SourceTargetRevision: get(EnvAppSourceTargetRev),
		KubeVersion:          get(EnvKubeVersion),
		ProjectName:          get(EnvAppProjectName),
	}
	e.AppShortName, e.AppControlNamespace = SplitAppName(e.AppName)
	e.Streamed = e.Revision == StreamedRevision
	for _, v := range strings.Split(get(EnvKubeAPIVersions), ",") {
		if v = strings.TrimSpace(v); v != "" {
			e.KubeAPIVersions = append(e.KubeAPIVersions, v)
		}
	}
	for _, k := range varNames {
		if v, ok := lookup(k); ok {
			if e.Vars == nil {
				e.Vars = map[string]string{}
			}
			e.Vars[strings.TrimPrefix(k, EnvVarPrefix)] = v
		}
	}
	if raw, ok := lookup(EnvAppParameters); ok {
		ps, err := ParseParameters(raw)
		if err != nil {
			return nil, err
		}
		e.Parameters = ps
	}
	return e, nil
}

// SplitAppName splits ARGOCD_APP_NAME into the Application's name and, for an
// Application outside the control-plane namespace ("namespace_name"), its namespace.
// Neither a namespace nor an Application name may contain "_", so the first "_"
// separates them.
func SplitAppName(raw string) (name, namespace string) {
	if ns, n, ok := strings.Cut(raw, "_"); ok {
		return n, ns
	}
	return raw, ""
}

// ParamKind is the kind of value a plugin parameter holds.
type ParamKind string

// The parameter value kinds, named as Argo CD's collectionType names them.
const (
	KindString ParamKind = "string"
	KindArray  ParamKind = "array"
	KindMap    ParamKind = "map"
)

// Parameter is one entry of ARGOCD_APP_PARAMETERS: a name and exactly one value kind.
type Parameter struct {
	Name   string
	Kind   ParamKind
	String string
	Array  []string
	Map    map[string]string
}

// Values returns the parameter as a list: the string itself (one item) or the array.
// A map has no list form and returns nil.
func (p Parameter) Values() []string {
	switch p.Kind {
	case KindString:
		return []string{p.String}
	case KindArray:
		return p.Array
	}
	return nil
}

// Parameters are the plugin parameters of an Application, in the order given.
type Parameters []Parameter

// Get returns the parameter with the given name.
func (ps Parameters) Get(name string) (Parameter, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p, true
		}
	}
	return Parameter{}, false
}

// Names returns the parameter names, sorted.
func (ps Parameters) Names() []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	slices.Sort(names)
	return names
}

// ParseParameters parses the value of ARGOCD_APP_PARAMETERS, as Argo CD writes it
// (ApplicationSourcePluginParameters.Environ: json.Marshal of the list, each entry a
// map so its keys are sorted, e.g.
// [{"name":"image-list","string":"web=ghcr.io/org/web:~1.2"},{"array":["a"],"name":"x"},{"map":{"k":"v"},"name":"y"}]).
// "null", an empty value and "[]" mean no parameters. An entry must have a name and
// exactly one of string, array or map; names must be unique. "array": null and
// "map": null (written by Argo CD versions before the custom marshaller for a present
// but empty value) are read as empty.
func ParseParameters(raw string) (Parameters, error) {
	if s := strings.TrimSpace(raw); s == "" || s == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	var entries []map[string]json.RawMessage
	if err := dec.Decode(&entries); err != nil {
		return nil, paramsError("malformed JSON: %s", oneline.Fold(err.Error()))
	}
	if dec.More() {
		return nil, paramsError("malformed JSON: data after the array")
	}
	out := make(Parameters, 0, len(entries))
	seen := map[string]int{}
	for i, entry := range entries {
		p, err := parseParameterEntry(i, entry)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[p.Name]; dup {
			return nil, paramsError("entries %d and %d both have name %q", j, i, p.Name)
		}
		seen[p.Name] = i
		out = append(out, p)
	}
	return out, nil
}

func parseParameterEntry(i int, entry map[string]json.RawMessage) (Parameter, error) {
	if entry == nil {
		return Parameter{}, paramsError("entry %d is null", i)
	}
	keys := make([]string, 0, len(entry))
	for k := range entry {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var p Parameter
	nameRaw, ok := entry["name"]
	if !ok {
		return p, paramsError("entry %d has no name", i)
	}
	if err := json.Unmarshal(nameRaw, &p.Name); err != nil || isNull(nameRaw) {
		return p, paramsError("entry %d: name is not a string", i)
	}
	if p.Name == "" {
		return p, paramsError("entry %d has an empty name", i)
	}
	var kinds []string
	for _, k := range keys {
		v := entry[k]
		switch k {
		case "name":
		case "string":
			if isNull(v) {
				return p, paramsError("entry %d (%q): string is null", i, p.Name)
			}
			if err := json.Unmarshal(v, &p.String); err != nil {
				return p, paramsError("entry %d (%q): string is not a JSON string", i, p.Name)
			}
			p.Kind = KindString
			kinds = append(kinds, k)
		case "array":
			if err := json.Unmarshal(v, &p.Array); err != nil {
				return p, paramsError("entry %d (%q): array is not a list of strings", i, p.Name)
			}
			if p.Array == nil {
				p.Array = []string{}
			}
			p.Kind = KindArray
			kinds = append(kinds, k)
		case "map":
			if err := json.Unmarshal(v, &p.Map); err != nil {
				return p, paramsError("entry %d (%q): map is not an object of strings", i, p.Name)
			}
			if p.Map == nil {
				p.Map = map[string]string{}
			}
			p.Kind = KindMap
			kinds = append(kinds, k)
		default:
			return p, paramsError("entry %d (%q) has unknown key %q", i, p.Name, k)
		}
	}
	switch len(kinds) {
	case 0:
		return p, paramsError("entry %d (%q) has no value", i, p.Name)
	case 1:
	default:
		return p, paramsError("entry %d (%q) has %d values (%s)", i, p.Name, len(kinds), strings.Join(kinds, ", "))
	}
	// Keep only the value of the kind given.
	switch p.Kind {
	case KindString:
		p.Array, p.Map = nil, nil
	case KindArray:
		p.String, p.Map = "", nil
	case KindMap:
		p.String, p.Array = "", nil
	}
	return p, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func paramsError(format string, args ...any) error {
	return fmt.Errorf("%s: %s (accepted: %s)", EnvAppParameters, fmt.Sprintf(format, args...), parametersAcceptedShape)
}
