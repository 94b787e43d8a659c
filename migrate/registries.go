package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// regEntry is one entry of the registries file, and where it came from.
type regEntry struct {
	cfg  resolve.RegistryConfig
	from []string
}

// registries gathers the registries file: argocd-image-updater's registries
// configuration, and the pull secrets of the migrated apps.
type registries struct {
	entries  []*regEntry
	findings []Finding
}

func (r *registries) add(k Kind, format string, args ...any) {
	r.findings = append(r.findings, Finding{Kind: k, Text: fmt.Sprintf(format, args...)})
}

func (r *registries) find(prefix string) *regEntry {
	for _, e := range r.entries {
		if e.cfg.Prefix == prefix {
			return e
		}
	}
	return nil
}

// check reads one entry as the resolver reads the registries file. A CA file is
// left out of the check: it is a path in the sidecar, not on this machine.
func check(cfg resolve.RegistryConfig) (resolve.RegistryConfig, error) {
	c := cfg
	c.CA = ""
	js, err := json.Marshal(map[string]any{"registries": []resolve.RegistryConfig{c}})
	if err != nil {
		return cfg, err
	}
	got, err := resolve.ParseRegistries("migrate", js)
	if err != nil {
		return cfg, err
	}
	out := got[0]
	out.CA = cfg.CA
	return out, nil
}

// readConfigMap reads argocd-image-updater's ConfigMap (argocd-image-updater-config):
// its registries.conf is carried over; its other settings are said.
func (r *registries) readConfigMap(d *doc) error {
	label := "ConfigMap " + mapString(mapGet(d.root, "metadata"), "name")
	data, err := stringMap(mapGet(d.root, "data"), "data")
	if err != nil {
		return &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s: %w", label, err)}
	}
	d.consumed = label + " (argocd-image-updater's configuration): its registries.conf is carried over into the registries file; it is not needed by the resolver"
	for _, k := range sortedKeys(data) {
		v := data[k]
		switch {
		case k == "registries.conf":
			var node yaml.Node
			if err := yaml.Unmarshal([]byte(v), &node); err != nil {
				return &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s data.registries.conf: not YAML: %w", label, err)}
			}
			if err := duplicateKey(&node, "", ""); err != nil {
				return &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s data.registries.conf (lines of its text): %w", label, err)}
			}
			if len(node.Content) == 0 {
				continue
			}
			if err := r.readConf(d, label+" data.registries.conf", node.Content[0]); err != nil {
				return err
			}
		case strings.HasPrefix(k, "git."):
			r.add(Lost, "%s data.%s: pin commits take author, message and signing from the sidecar's git: configuration (git.author, git.message, git.signingKeyFile), set by the operator", label, k)
		default:
			r.add(Note, "%s data.%s: a setting of argocd-image-updater's controller; the resolver has none like it (see the sidecar's configuration: serve --help)", label, k)
		}
	}
	return nil
}

// readConf reads a registries.conf document (registries: [...]).
func (r *registries) readConf(d *doc, from string, root *yaml.Node) error {
	list := mapGet(root, "registries")
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s registries: not a list", from)}
	}
	for i, n := range list.Content {
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			return &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s registries[%d]: not a mapping: %w", from, i, err)}
		}
		r.readEntry(m, fmt.Sprintf("%s registries[%d]", from, i))
	}
	return nil
}

func truthy(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case string:
		switch strings.ToLower(t) {
		case "true", "yes", "on", "y":
			return true
		}
	}
	return false
}

// readEntry carries one of argocd-image-updater's registry entries over.
func (r *registries) readEntry(m map[string]any, from string) {
	s := func(k string) string {
		if v, ok := m[k]; ok && v != nil {
			return strings.TrimSpace(fmt.Sprint(v))
		}
		return ""
	}
	prefix := s("prefix")
	if prefix == "" {
		r.add(Lost, "%s: no prefix; argocd-image-updater requires one", from)
		return
	}
	cfg := resolve.RegistryConfig{Prefix: prefix}
	where := fmt.Sprintf("%s (prefix %s)", from, prefix)
	if name := s("name"); name != "" {
		where = fmt.Sprintf("%s (%s)", from, name)
	}
	for _, k := range sortedKeys(m) {
		r.readEntryKey(&cfg, where, k, s(k), m[k])
	}
	if cfg.CA != "" && cfg.Insecure {
		r.add(Lost, "%s ca_file: not with insecure; the resolver takes one or the other", where)
		cfg.CA = ""
	}
	checked, err := check(cfg)
	if err != nil {
		r.add(Lost, "%s: %v", where, err)
		return
	}
	if e := r.find(checked.Prefix); e != nil {
		r.add(Lost, "%s: prefix %s is configured already (%s); the first is kept", where, checked.Prefix, strings.Join(e.from, "; "))
		return
	}
	r.entries = append(r.entries, &regEntry{cfg: checked, from: []string{where}})
	if t := extCredentials(checked.Credentials, checked.Prefix); t != "" {
		r.add(Lost, "%s %s", where, t)
	}
}

// readEntryKey carries key k of a registry entry over into cfg: v is its value
// trimmed, raw as written.
func (r *registries) readEntryKey(cfg *resolve.RegistryConfig, where, k, v string, raw any) {
	prefix := cfg.Prefix
	switch k {
	case "prefix", "name":
	case "api_url":
		r.readAPIURL(cfg, where, v)
	case "credentials":
		src, err := resolve.ParseCredentialSource(v)
		if err != nil {
			r.add(Lost, "%s credentials %q: %v (accepted: see docs/registries.md, Credential sources)", where, v, err)
			return
		}
		cfg.Credentials = src.String()
	case "credsexpire":
		if _, err := time.ParseDuration(v); err != nil {
			r.add(Lost, "%s credsexpire %q: not a duration", where, v)
			return
		}
		cfg.CredentialsExpire = v
	case "insecure":
		if truthy(raw) {
			cfg.Insecure = true
		}
	case "ca_file":
		cfg.CA = v
	case "ca_data":
		r.add(Lost, "%s ca_data: write the certificates to a file mounted in the sidecar and name it in ca", where)
	case "defaultns":
		if !(v == "library" && sameHost("docker.io", prefix)) {
			cfg.DefaultNamespace = v
		}
	case "default":
		switch {
		case !truthy(raw):
		case sameHost("docker.io", prefix):
			r.add(Note, "%s default: true: not needed; Docker Hub is the resolver's default registry too", where)
		default:
			r.add(Lost, "%s default: true: images without a registry are Docker Hub's for the resolver, as for the container runtime; write the registry in image-list", where)
		}
	case "limit":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			r.add(Lost, "%s limit %q: not a number of requests per second", where, v)
			return
		}
		cfg.RateLimit = f
	case "ping":
		r.add(Note, "%s ping: not needed; the resolver does not ping registries", where)
	case "tagsortmode":
		r.add(Lost, "%s tagsortmode %q: the resolver orders tags by its update-strategy alone", where, v)
	default:
		r.add(Lost, "%s %s: unknown to migrate", where, k)
	}
}

// readAPIURL carries an entry's api_url over: the resolver takes a host (api),
// and plain HTTP as insecure.
func (r *registries) readAPIURL(cfg *resolve.RegistryConfig, where, v string) {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		r.add(Lost, "%s api_url: not a URL", where)
		return
	}
	if u.User != nil {
		r.add(Lost, "%s api_url %q: credentials in the URL are not carried over; name a credential source in credentials", where, u.Redacted())
		u.User = nil
	}
	v = u.String()
	if u.Scheme == "http" {
		cfg.Insecure = true
		r.add(Note, "%s api_url %q: plain HTTP is insecure: true here (which also allows HTTPS without certificate verification)", where, v)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/v2" {
		r.add(Lost, "%s api_url %q: a path before /v2 is not supported; the registry is read at %s", where, v, u.Host)
	}
	if !sameHost(u.Host, cfg.Prefix) {
		cfg.API = u.Host
	}
}

// extCredentials says what an ext: credential script becomes, or "" for another
// source: kept in the registries file, but a script written for
// argocd-image-updater's image cannot run in the sidecar's, which has no shell and
// no tools (only the resolver's static binaries and CA certificates); and its path is
// a file of argocd-image-updater's pod. It proposes the native keychain of the
// registry's cloud when the prefix's host is one (as the resolver itself accepts
// ecr, google and acr), else what runs there.
func extCredentials(source, prefix string) string {
	if !strings.HasPrefix(source, resolve.CredExt+":") {
		return ""
	}
	text := fmt.Sprintf("credentials %q: kept, but it cannot run as it is: the sidecar image has no shell and no tools (no sh, curl, aws, gcloud or az), and the script is a file of argocd-image-updater's pod, not of the sidecar", source)
	for _, k := range []struct{ kind, what string }{
		{resolve.CredECR, "the resolver gets ECR's token itself through the AWS SDK (IRSA or EKS Pod Identity for argocd-repo-server's service account; docs/registries.md, Amazon ECR)"},
		{resolve.CredGoogle, "the resolver gets Artifact Registry's and Container Registry's tokens itself from Application Default Credentials (GKE Workload Identity; docs/registries.md, Google Artifact Registry and Container Registry)"},
		{resolve.CredACR, "the resolver gets ACR's token itself through Entra ID (AKS Workload Identity or a managed identity; docs/registries.md, Azure Container Registry)"},
	} {
		if _, err := check(resolve.RegistryConfig{Prefix: prefix, Credentials: k.kind}); err == nil {
			return fmt.Sprintf("%s; write credentials: %s instead: %s", text, k.kind, k.what)
		}
	}
	return text + "; mount a static executable into the sidecar at that path, or use another credential source: secret:, pullsecret:, dockerconfig: or env: (docs/registries.md, Credential sources)"
}

// sameHost compares a URL host with a registry prefix's host, Docker Hub's
// names being one.
func sameHost(host, prefix string) bool {
	h, _, _ := strings.Cut(prefix, "/")
	norm := func(s string) string {
		switch s {
		case "docker.io", "index.docker.io", "registry-1.docker.io":
			return "docker.io"
		}
		return s
	}
	return norm(strings.ToLower(host)) == norm(strings.ToLower(h))
}

// addCredentials puts an app's pull secrets into the registries file, one entry
// per repository.
func (r *registries) addCredentials(app string, creds []credential, c *converted) {
	for _, cr := range creds {
		e := r.find(cr.prefix)
		switch {
		case e == nil:
			cfg, err := check(resolve.RegistryConfig{Prefix: cr.prefix, Credentials: cr.source})
			if err != nil {
				c.add(Lost, "%s: pull-secret %q for %s: %v", cr.from, cr.source, cr.prefix, err)
				continue
			}
			r.entries = append(r.entries, &regEntry{cfg: cfg, from: []string{fmt.Sprintf("pull-secret of Application %s", app)}})
			c.add(Note, "%s: pull-secret %q is the credentials of prefix %s in the registries file, for every app that resolves that repository (the operator's file, not the Application's)", cr.from, cr.source, cr.prefix)
		case e.cfg.Credentials == cr.source:
			e.from = appendOnce(e.from, fmt.Sprintf("pull-secret of Application %s", app))
			c.add(Note, "%s: pull-secret %q is the credentials of prefix %s in the registries file", cr.from, cr.source, cr.prefix)
		case e.cfg.Credentials == "":
			e.cfg.Credentials = cr.source
			e.from = appendOnce(e.from, fmt.Sprintf("pull-secret of Application %s", app))
			c.add(Note, "%s: pull-secret %q is the credentials of prefix %s in the registries file", cr.from, cr.source, cr.prefix)
		default:
			c.add(Lost, "%s: pull-secret %q for %s: the registries file has one credential per prefix, and %s gives %q", cr.from, cr.source, cr.prefix, strings.Join(e.from, "; "), e.cfg.Credentials)
			continue
		}
		if t := extCredentials(cr.source, cr.prefix); t != "" {
			c.add(Lost, "%s: pull-secret %s", cr.from, t)
		}
	}
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// render writes the registries file, entries sorted by prefix, its findings as
// comments above them; nil when it has neither entries nor findings.
func (r *registries) render() ([]byte, []Finding, error) {
	if len(r.entries) == 0 && len(r.findings) == 0 {
		return nil, nil, nil
	}
	entries := slices.Clone(r.entries)
	slices.SortStableFunc(entries, func(a, b *regEntry) int { return strings.Compare(a.cfg.Prefix, b.cfg.Prefix) })
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, e := range entries {
		m := &yaml.Node{Kind: yaml.MappingNode, HeadComment: "from " + oneLine(strings.Join(e.from, "; "))}
		c := e.cfg
		mapSet(m, "prefix", scalar(c.Prefix))
		if c.API != "" {
			mapSet(m, "api", scalar(c.API))
		}
		if c.Insecure {
			mapSet(m, "insecure", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
		}
		if c.CA != "" {
			mapSet(m, "ca", scalar(c.CA))
		}
		if c.Credentials != "" {
			mapSet(m, "credentials", scalar(c.Credentials))
		}
		if c.CredentialsExpire != "" {
			mapSet(m, "credentialsExpire", scalar(c.CredentialsExpire))
		}
		if c.RateLimit != 0 {
			mapSet(m, "rateLimit", &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(c.RateLimit, 'f', -1, 64)})
		}
		if c.DefaultNamespace != "" {
			mapSet(m, "defaultNamespace", scalar(c.DefaultNamespace))
		}
		seq.Content = append(seq.Content, m)
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	mapSet(root, "registries", seq)
	var b bytes.Buffer
	for _, l := range findingLines(sortFindings(r.findings)) {
		b.WriteString("# " + oneLine(l) + "\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return b.Bytes(), r.findings, nil
}
