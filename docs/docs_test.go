package docs_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var update = flag.Bool("update", false, "rewrite the generated settings table of configuration.md from config.Settings")

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// requireMentioned fails for each name that doc does not mention as `name` (code
// span), so that a word in prose does not count as documentation.
func requireMentioned(t *testing.T, doc, docName, what string, names []string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatalf("no %s found in the code: the probe no longer works", what)
	}
	for _, n := range names {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("%s does not document %s `%s`", docName, what, n)
		}
	}
}

// acceptedList extracts the comma- or semicolon-separated list after the last
// "(accepted: " of an error message, as the code's own errors print it.
func acceptedList(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("want an error listing the accepted names, got none")
	}
	msg := err.Error()
	i := strings.LastIndex(msg, "(accepted: ")
	if i < 0 {
		t.Fatalf("error does not list what is accepted: %v", err)
	}
	list := strings.TrimSuffix(strings.TrimSpace(msg[i+len("(accepted: "):]), ")")
	var out []string
	for _, item := range regexp.MustCompile(`[,;]\s*`).Split(list, -1) {
		item = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(item), "(defaults for all images)"))
		if item != "" {
			out = append(out, item)
		}
	}
	return out
}

// ---- configuration.md ----

const (
	settingsBegin = "<!-- settings table: generated from config.Settings() by docs/docs_test.go; regenerate with: go test ./docs -update -->"
	settingsEnd   = "<!-- end of the generated settings table -->"
)

var mdEscaper = strings.NewReplacer("|", `\|`, "*", `\*`)

// settingsTable is the table of every daemon setting, from the code's declarations.
func settingsTable() string {
	def := config.DefaultConfig()
	var b strings.Builder
	b.WriteString("| file key | environment variable | flag | default | meaning |\n|---|---|---|---|---|\n")
	for _, s := range config.Settings() {
		d := def.Get(s.Key)
		switch {
		case d == "":
			d = "none"
		default:
			d = "`" + d + "`"
		}
		fl := "`--" + s.Flag + " <" + s.Type + ">`"
		if s.List {
			fl += " (repeatable)"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", s.Key, s.Env, fl, d, mdEscaper.Replace(s.Usage))
	}
	return b.String()
}

// TestConfigurationSettingsTable: configuration.md's table of settings is exactly what
// config.Settings declares (key, variable, flag, default, meaning), so a setting added
// in code without its documentation fails here. go test ./docs -update rewrites it.
func TestConfigurationSettingsTable(t *testing.T) {
	const name = "configuration.md"
	doc := readDoc(t, name)
	begin := strings.Index(doc, settingsBegin)
	end := strings.Index(doc, settingsEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s: no generated settings table between %q and %q", name, settingsBegin, settingsEnd)
	}
	want := settingsBegin + "\n" + settingsTable() + settingsEnd
	got := doc[begin : end+len(settingsEnd)]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(name, []byte(doc[:begin]+want+doc[end+len(settingsEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: settings table rewritten", name)
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, l := range wantLines {
		if !slices.Contains(gotLines, l) {
			t.Errorf("%s lacks: %s", name, l)
		}
	}
	for _, l := range gotLines {
		if !slices.Contains(wantLines, l) {
			t.Errorf("%s has, but the code does not declare: %s", name, l)
		}
	}
	t.Errorf("%s: the settings table differs from config.Settings(); run go test ./docs -update and review the diff", name)
}

// TestConfigurationFileKeys: every top-level key of the configuration file (the
// settings, registries and git, as the file's own unknown-key error lists them) and
// every key of the git: section is documented.
func TestConfigurationFileKeys(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	c := config.DefaultConfig()
	keys := acceptedList(t, c.ParseFile("probe", []byte("zz-not-a-key: 1")))
	requireMentioned(t, doc, "configuration.md", "configuration file key", keys)

	requireMentioned(t, doc, "configuration.md", "git: key", jsonKeys[config.GitConfig](""))
	requireMentioned(t, doc, "configuration.md", "git: key", jsonKeys[config.GitCredential]("credentials[]."))
}

// jsonKeys are the JSON (and so YAML) keys of T's fields, each after prefix.
func jsonKeys[T any](prefix string) []string {
	var keys []string
	for f := range reflect.TypeFor[T]().Fields() {
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
			keys = append(keys, prefix+tag)
		}
	}
	return keys
}

// moduleRoot is the main module's directory (this package is docs/ in it).
const moduleRoot = ".."

// TestConfigurationEnvironment: every IMAGE_RESOLVER_* variable the product's code
// reads (string literals in its non-test Go files, outside e2e/ and test helper
// packages) is documented in configuration.md.
func TestConfigurationEnvironment(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	re := regexp.MustCompile(`"(IMAGE_RESOLVER_[A-Z0-9_]*[A-Z0-9])"`)
	found := map[string]bool{}
	err := filepath.WalkDir(moduleRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch base := d.Name(); {
			case p == moduleRoot:
			case strings.HasPrefix(base, "."), base == "e2e", base == "testdata", base == "bin", strings.HasSuffix(base, "test"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			found[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range found {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, s := range config.Settings() {
		if !found[s.Env] {
			t.Errorf("setting %s's variable %s not found in the sources: the scan misses how variables are declared", s.Key, s.Env)
		}
	}
	requireMentioned(t, doc, "configuration.md", "environment variable", names)
}

// ---- parameters.md ----

const probeAlias = "web"

// appWithAlias is an app directory whose policy file declares probeAlias.
func appWithAlias(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, plugin.PolicyFileName), []byte("images:\n  "+probeAlias+":\n    image: ghcr.io/org/web\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func generic(name string) string {
	if rest, ok := strings.CutPrefix(name, probeAlias+"."); ok {
		return "<alias>." + rest
	}
	return name
}

// TestParametersDocumented: every parameter the plugin announces to Argo CD's UI,
// every name its unknown-parameter errors list as accepted, and the per-alias keys
// it accepts without announcing them (helm.*, tag-match) are in parameters.md.
func TestParametersDocumented(t *testing.T) {
	doc := readDoc(t, "parameters.md")
	dir := appWithAlias(t)
	anns, err := plugin.Announcements("", dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range anns {
		names = append(names, generic(a.Name))
	}
	requireMentioned(t, doc, "parameters.md", "announced parameter", names)

	_, err = plugin.LoadPolicy(dir, plugin.Parameters{{Name: "zz-not-a-parameter", Kind: plugin.KindString, String: "x"}})
	requireMentioned(t, doc, "parameters.md", "parameter", acceptedList(t, err))
	_, err = plugin.LoadPolicy(dir, plugin.Parameters{{Name: probeAlias + ".zz-not-a-key", Kind: plugin.KindString, String: "x"}})
	requireMentioned(t, doc, "parameters.md", "per-image parameter", acceptedList(t, err))

	requireMentioned(t, doc, "parameters.md", "per-image parameter", []string{
		"<alias>." + plugin.KeyHelmImageTag, "<alias>." + plugin.KeyHelmImageName,
		"<alias>." + plugin.KeyHelmImageSpec, "<alias>." + plugin.KeyTagMatch,
	})

	var values []string
	for _, w := range regexp.MustCompile(`[a-z][a-z-]*`).FindAllString(resolve.StrategyAccepted, -1) {
		if w != "default" && w != "old" && w != "names" {
			values = append(values, w)
		}
	}
	values = append(values, plugin.PinOff, plugin.PinWrite, plugin.PinUse, plugin.RefreshHard, plugin.RefreshOff,
		plugin.PinPushDirect, plugin.PinPushPullRequest, plugin.PinPRGroupApp, plugin.PinPRGroupRepository,
		pin.TargetPins, pin.TargetKustomization, pin.TargetHelmValues+":<path>", pin.PinsFile, plugin.PolicyFileName)
	requireMentioned(t, doc, "parameters.md", "value", values)
}

// TestPolicyFileKeysDocumented: every key the policy file accepts, as its own
// unknown-key errors list them, is in parameters.md.
func TestPolicyFileKeysDocumented(t *testing.T) {
	doc := readDoc(t, "parameters.md")
	probe := func(content string) []string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, plugin.PolicyFileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := plugin.LoadPolicy(dir, nil)
		return acceptedList(t, err)
	}
	requireMentioned(t, doc, "parameters.md", "policy file key", probe("zzNotAKey: 1\n"))
	var imageKeys []string
	for _, k := range probe("images:\n  web:\n    image: ghcr.io/org/web\n    zzNotAKey: 1\n") {
		imageKeys = append(imageKeys, "images.<alias>."+k)
	}
	requireMentioned(t, doc, "parameters.md", "policy file key", imageKeys)
}

// TestRejectedKeysAreRejected: each argocd-image-updater key parameters.md says is an
// error is one, with a message that says why.
func TestRejectedKeysAreRejected(t *testing.T) {
	doc := readDoc(t, "parameters.md")
	_, section, ok := strings.Cut(doc, "## argocd-image-updater keys that are errors here")
	if !ok {
		t.Fatal("parameters.md: no section \"argocd-image-updater keys that are errors here\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	dir := appWithAlias(t)
	n := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			name := strings.Replace(m[1], "<alias>.", probeAlias+".", 1)
			n++
			_, err := plugin.LoadPolicy(dir, plugin.Parameters{{Name: name, Kind: plugin.KindString, String: "x"}})
			if err == nil || !strings.Contains(err.Error(), "argocd-image-updater's") {
				t.Errorf("parameters.md says %s is an error explaining argocd-image-updater's key; LoadPolicy says: %v", name, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("parameters.md: no rejected keys found in the table")
	}
}

// ---- registries.md ----

// TestRegistriesKeysDocumented: every key of a registries entry and every credential
// source the code accepts is in registries.md.
func TestRegistriesKeysDocumented(t *testing.T) {
	doc := readDoc(t, "registries.md")
	requireMentioned(t, doc, "registries.md", "registries key", jsonKeys[resolve.RegistryConfig](""))
	kinds := strings.Split(resolve.CredentialSourceForms, ", ")
	if len(kinds) < 2 {
		t.Fatalf("resolve.CredentialSourceForms = %q: not a list", resolve.CredentialSourceForms)
	}
	for _, form := range kinds {
		// the kind and its separator: "dockerconfig:", "ecr", "github"
		kind := form
		if i := strings.IndexAny(form, ":["); i >= 0 {
			kind = form[:i+1]
			if form[i] == '[' {
				kind = form[:i]
			}
		}
		if !strings.Contains(doc, "`"+kind) {
			t.Errorf("registries.md does not document the credential source %s", form)
		}
		// and it parses as the code reads it
		if _, err := resolve.ParseCredentialSource(exampleSource(form)); err != nil {
			t.Errorf("credential source %s (as %q): %v", form, exampleSource(form), err)
		}
	}
}

// exampleSource fills a credential form's placeholders.
func exampleSource(form string) string {
	return strings.NewReplacer("/path/config.json", "/etc/docker/config.json", "NAMESPACE/NAME", "argocd/regcred",
		"#FIELD", "#creds", "[:VAR]", ":GH_TOKEN", "VAR", "REG_CREDS", "/path/to/script", "/opt/login.sh").Replace(form)
}

// ---- examples and links ----

type codeBlock struct {
	doc, info, text string
	line            int
}

func codeBlocks(t *testing.T) []codeBlock {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []codeBlock
	for _, name := range names {
		lines := strings.Split(readDoc(t, name), "\n")
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			if !strings.HasPrefix(l, "```") {
				continue
			}
			b := codeBlock{doc: name, info: strings.TrimPrefix(l, "```"), line: i + 1}
			var body []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n") + "\n"
			out = append(out, b)
		}
	}
	return out
}

// TestExamplesParse: the docs' examples are accepted by the code that reads them:
// policy files (a yaml block whose first line is "# .argocd-image-resolver.yaml"),
// configuration files ("# IMAGE_RESOLVER_CONFIG"), and the plugin parameters of every
// Application (named image-resolver-v1, the plugin's name in ../plugin.yaml).
func TestExamplesParse(t *testing.T) {
	pluginName := pluginName(t)
	counts := map[string]int{}
	for _, b := range codeBlocks(t) {
		if b.info != "yaml" {
			continue
		}
		where := fmt.Sprintf("%s:%d", b.doc, b.line)
		first, _, _ := strings.Cut(b.text, "\n")
		switch {
		case first == "# "+plugin.PolicyFileName || strings.HasSuffix(first, "/"+plugin.PolicyFileName):
			counts["policy file"]++
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, plugin.PolicyFileName), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := plugin.LoadPolicy(dir, nil); err != nil {
				t.Errorf("%s: policy file example: %v", where, err)
			}
		case first == "# "+config.ConfigEnv:
			counts["configuration"]++
			c := config.DefaultConfig()
			if err := c.ParseFile(where, []byte(b.text)); err != nil {
				t.Errorf("%s: configuration example: %v", where, err)
			} else if err := c.Validate(); err != nil {
				t.Errorf("%s: configuration example: %v", where, err)
			}
		}
		for _, doc := range strings.Split(b.text, "\n---\n") {
			if !strings.Contains(doc, "kind: Application\n") {
				continue
			}
			var app struct {
				Kind string
				Spec struct {
					Source struct {
						Plugin *struct {
							Name       string
							Parameters json.RawMessage
						}
					}
				}
			}
			if err := yaml.Unmarshal([]byte(doc), &app); err != nil {
				t.Errorf("%s: Application example: %v", where, err)
				continue
			}
			if app.Kind != "Application" || app.Spec.Source.Plugin == nil {
				continue
			}
			counts["Application"]++
			if got := app.Spec.Source.Plugin.Name; got != pluginName {
				t.Errorf("%s: Application names plugin %q, want %q", where, got, pluginName)
			}
			raw := bytes.TrimSpace(app.Spec.Source.Plugin.Parameters)
			if len(raw) == 0 {
				raw = []byte("null")
			}
			params, err := plugin.ParseParameters(string(raw))
			if err != nil {
				t.Errorf("%s: Application parameters: %v", where, err)
				continue
			}
			if _, err := plugin.LoadPolicy(t.TempDir(), params); err != nil {
				t.Errorf("%s: Application parameters: %v", where, err)
			}
		}
	}
	for _, kind := range []string{"policy file", "configuration", "Application"} {
		if counts[kind] == 0 {
			t.Errorf("no %s example found in the docs: the check is not checking", kind)
		}
	}
	t.Logf("examples checked: %v", counts)
}

// pluginName is the name Applications use: metadata.name-spec.version of plugin.yaml.
func pluginName(t *testing.T) string {
	t.Helper()
	var p struct {
		Metadata struct{ Name string }
		Spec     struct{ Version string }
	}
	if err := yaml.Unmarshal([]byte(readDoc(t, filepath.Join(moduleRoot, "plugin.yaml"))), &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Name == "" || p.Spec.Version == "" {
		t.Fatalf("plugin.yaml: no metadata.name or spec.version")
	}
	return p.Metadata.Name + "-" + p.Spec.Version
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the heading anchors GitHub gives a Markdown file (code blocks left out).
func anchors(text string) map[string]bool {
	var prose strings.Builder
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			prose.WriteString(l + "\n")
		}
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(prose.String(), -1) {
		s := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestLinks: every relative link of the docs names a file of the repository, and
// every #anchor a heading of its Markdown file.
func TestLinks(t *testing.T) {
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		text := readDoc(t, name)
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			file, anchor, _ := strings.Cut(target, "#")
			path := name
			if file != "" {
				path = filepath.Join(filepath.Dir(name), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %v", name, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors(readDoc(t, path))[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", name, target, path, anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("no relative links found")
	}
}

// cliNames are the subcommands and flags of argocd-image-resolver, read from its
// sources (cobra's Use: and the flag definitions) and from config (the setting flags
// of serve and sidecar, --config, --registries-config).
func cliNames(t *testing.T) (commands, flags map[string]bool) {
	t.Helper()
	commands, flags = map[string]bool{}, map[string]bool{"help": true, "version": true, "config": true, "registries-config": true}
	for _, s := range config.Settings() {
		flags[s.Flag] = true
	}
	files, err := filepath.Glob(filepath.Join(moduleRoot, "cmd", "argocd-image-resolver", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	useRE := regexp.MustCompile(`Use:\s*"([a-z][a-z-]*)`)
	flagRE := regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Float64|Duration|Var|Count)[A-Za-z]*\([^"\n]*"([a-z][a-z0-9-]*)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range useRE.FindAllSubmatch(b, -1) {
			commands[string(m[1])] = true
		}
		for _, m := range flagRE.FindAllSubmatch(b, -1) {
			flags[string(m[1])] = true
		}
	}
	if len(commands) < 5 || !commands["resolve"] || !flags["explain"] {
		t.Fatalf("reading the CLI's sources found commands %v and flags %v: the probe no longer works", commands, flags)
	}
	return commands, flags
}

// TestCommandsInDocs: every `argocd-image-resolver SUBCOMMAND --flag` the docs show
// (in code blocks and code spans) names a subcommand and flags the CLI has.
func TestCommandsInDocs(t *testing.T) {
	commands, flags := cliNames(t)
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	cmdRE := regexp.MustCompile(`(?:^|[\s/$(` + "`" + `])argocd-image-resolver\s+([a-z][a-z-]*)([^\n` + "`" + `]*)`)
	flagRE := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	n := 0
	for _, name := range names {
		for _, m := range cmdRE.FindAllStringSubmatch(readDoc(t, name), -1) {
			sub, rest := m[1], m[2]
			if !commands[sub] {
				t.Errorf("%s: argocd-image-resolver %s: no such subcommand (have %v)", name, sub, slices.Sorted(maps.Keys(commands)))
				continue
			}
			n++
			if sub == "sidecar" {
				rest, _, _ = strings.Cut(rest, " -- ") // the CMP server's own arguments follow
			}
			for _, f := range flagRE.FindAllStringSubmatch(rest, -1) {
				if !flags[f[1]] {
					t.Errorf("%s: argocd-image-resolver %s ... --%s: no such flag", name, sub, f[1])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no argocd-image-resolver command found in the docs")
	}
	t.Logf("%d commands checked", n)
}
