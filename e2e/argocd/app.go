package argocde2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Application is the part of an Application's status the tests read.
type Application struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Source struct {
			RepoURL string `json:"repoURL"`
			Path    string `json:"path"`
			Plugin  *struct {
				Name string `json:"name"`
			} `json:"plugin"`
		} `json:"source"`
	} `json:"spec"`
	Status struct {
		Sync struct {
			Status   string `json:"status"`
			Revision string `json:"revision"`
		} `json:"sync"`
		Health struct {
			Status string `json:"status"`
		} `json:"health"`
		Conditions []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"conditions"`
		ReconciledAt string `json:"reconciledAt"`
	} `json:"status"`
}

// Condition returns the message of the first condition of type typ ("" if none).
func (a *Application) Condition(typ string) string {
	for _, c := range a.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// ConditionsText lists every condition, for failure messages.
func (a *Application) ConditionsText() string {
	var s []string
	for _, c := range a.Status.Conditions {
		s = append(s, c.Type+": "+c.Message)
	}
	return strings.Join(s, "\n")
}

// App reads an Application with `argocd app get NAME -o json`, as a user's script would.
func (l *Lab) App(name string) (*Application, error) {
	out, err := l.must("", "argocd", "app", "get", name, "-o", "json")
	if err != nil {
		return nil, err
	}
	var a Application
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		return nil, fmt.Errorf("argocd app get %s -o json: %w", name, err)
	}
	return &a, nil
}

// appFromKube reads the Application from the API server, without argocd-server and
// without starting a process (the wait loops poll it).
func (l *Lab) appFromKube(name string) (*Application, error) { return l.AppIn("argocd", name) }

// AppIn reads the Application ns/name from the API server.
func (l *Lab) AppIn(ns, name string) (*Application, error) {
	req, err := http.NewRequest(http.MethodGet, l.kubeURL+"/apis/argoproj.io/v1alpha1/namespaces/"+ns+"/applications/"+name, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+l.kubeToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET application %s: %s: %s", name, resp.Status, buf.String())
	}
	var a Application
	if err := json.Unmarshal(buf.Bytes(), &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// WaitApp polls the Application until ok says so (nil error), for up to limit.
func (l *Lab) WaitApp(name string, limit time.Duration, what string, ok func(*Application) error) (*Application, error) {
	var a *Application
	err := waitFor(limit, fmt.Sprintf("app %s: %s", name, what), nil, func() error {
		var err error
		if a, err = l.appFromKube(name); err != nil {
			return err
		}
		return ok(a)
	})
	return a, err
}

// Compared: the controller compared the app (Synced or OutOfSync, no error).
func Compared(a *Application) error {
	if s := a.Status.Sync.Status; s == "Synced" || s == "OutOfSync" {
		return nil
	}
	return fmt.Errorf("sync status %q; conditions: %s", a.Status.Sync.Status, a.ConditionsText())
}

// SyncStatus: the app's sync status is want.
func SyncStatus(want string) func(*Application) error {
	return func(a *Application) error {
		if a.Status.Sync.Status != want {
			return fmt.Errorf("sync status %q, want %q; conditions: %s", a.Status.Sync.Status, want, a.ConditionsText())
		}
		return nil
	}
}

// HasCondition: a condition of type typ is set.
func HasCondition(typ string) func(*Application) error {
	return func(a *Application) error {
		if a.Condition(typ) == "" {
			return fmt.Errorf("no %s condition; sync status %q; conditions: %s", typ, a.Status.Sync.Status, a.ConditionsText())
		}
		return nil
	}
}

// ---------------------------------------------------------------------------------
// manifests

// Object is one Kubernetes object as JSON-ish maps.
type Object map[string]any

func (o Object) Kind() string { s, _ := o["kind"].(string); return s }
func (o Object) Name() string { return o.str("metadata", "name") }
func (o Object) Namespace() string {
	return o.str("metadata", "namespace")
}

func (o Object) str(path ...string) string {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// Annotation returns metadata.annotations[key].
func (o Object) Annotation(key string) string {
	m, _ := o["metadata"].(map[string]any)
	a, _ := m["annotations"].(map[string]any)
	s, _ := a[key].(string)
	return s
}

// Images lists the images of the pod template (initContainers first, then
// containers), for Deployments, StatefulSets, DaemonSets, Jobs and CronJobs.
func (o Object) Images() []string {
	spec, _ := o["spec"].(map[string]any)
	if o.Kind() == "CronJob" {
		jt, _ := spec["jobTemplate"].(map[string]any)
		spec, _ = jt["spec"].(map[string]any)
	}
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	var imgs []string
	for _, key := range []string{"initContainers", "containers"} {
		cs, _ := pod[key].([]any)
		for _, c := range cs {
			m, _ := c.(map[string]any)
			if s, ok := m["image"].(string); ok {
				imgs = append(imgs, s)
			}
		}
	}
	return imgs
}

// Objects is a rendered app.
type Objects []Object

// Get returns the object "Kind/name".
func (objs Objects) Get(key string) (Object, error) {
	kind, name, _ := strings.Cut(key, "/")
	var keys []string
	for _, o := range objs {
		if o.Kind() == kind && o.Name() == name {
			return o, nil
		}
		keys = append(keys, o.Kind()+"/"+o.Name())
	}
	return nil, fmt.Errorf("no %s among %v", key, keys)
}

// ParseManifests reads `argocd app manifests` output: YAML documents separated by
// "---" lines.
func ParseManifests(out string) (Objects, error) {
	var objs Objects
	for _, doc := range splitYAML(out) {
		var o Object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

func splitYAML(s string) []string {
	var docs []string
	var cur []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimRight(line, " ") == "---" {
			docs = append(docs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	docs = append(docs, strings.Join(cur, "\n"))
	var out []string
	for _, d := range docs {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}

// Manifests runs `argocd app manifests NAME` (the target state argocd-server gets from
// repo-server, which answers from its cache for the app's revision).
func (l *Lab) Manifests(name string, args ...string) (Objects, error) {
	out, err := l.must("", append([]string{"argocd", "app", "manifests", name}, args...)...)
	if err != nil {
		return nil, err
	}
	return ParseManifests(out)
}

// LiveObject reads an object from the API server with kubectl.
func (l *Lab) LiveObject(ns, kind, name string) (Object, error) {
	out, err := l.must("", "kubectl", "-n", ns, "get", kind, name, "-o", "json")
	if err != nil {
		return nil, err
	}
	var o Object
	return o, json.Unmarshal([]byte(out), &o)
}

// ---------------------------------------------------------------------------------
// the API as the UI uses it

// Token logs in through the API (POST /api/v1/session), as the UI does.
func (l *Lab) Token() (string, error) {
	body, _ := json.Marshal(map[string]string{"username": "admin", "password": adminPassword})
	resp, err := httpClient.Post("http://"+l.ServerAddr+"/api/v1/session", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Token == "" {
		return "", fmt.Errorf("POST /api/v1/session: %s %v", resp.Status, err)
	}
	return r.Token, nil
}

// ParameterAnnouncement is one entry of the plugin's announcement (the Parameters tab).
type ParameterAnnouncement struct {
	Name           string            `json:"name"`
	Title          string            `json:"title"`
	CollectionType string            `json:"collectionType"`
	String         string            `json:"string"`
	Array          []string          `json:"array"`
	Map            map[string]string `json:"map"`
}

// AppDetails asks argocd-server for a source's details as the UI's Parameters tab
// does (POST /api/v1/repositories/{repoURL}/appdetails -> repo-server's
// GetAppDetails -> the plugin's parameters.dynamic command in the sidecar).
func (l *Lab) AppDetails(appName, path string) (typ string, params []ParameterAnnouncement, err error) {
	tok, err := l.Token()
	if err != nil {
		return "", nil, err
	}
	q := map[string]any{
		"source": map[string]any{
			"repoURL": l.GitURL, "path": path, "targetRevision": "main",
			"plugin": map[string]any{"name": PluginName},
		},
		"appName": appName, "appProject": "default",
	}
	body, _ := json.Marshal(q)
	req, _ := http.NewRequest(http.MethodPost, "http://"+l.ServerAddr+"/api/v1/repositories/"+url.PathEscape(l.GitURL)+"/appdetails", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	client := *httpClient
	client.Timeout = 60 * time.Second
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("appdetails: %s: %s", resp.Status, buf.String())
	}
	var r struct {
		Type   string `json:"type"`
		Plugin struct {
			ParametersAnnouncement []ParameterAnnouncement `json:"parametersAnnouncement"`
		} `json:"plugin"`
	}
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		return "", nil, fmt.Errorf("appdetails: %w: %s", err, buf.String())
	}
	return r.Type, r.Plugin.ParametersAnnouncement, nil
}

// ---------------------------------------------------------------------------------
// Application files for `argocd app create -f`

// AppSpec is an Application the tests create from a file (plugin parameters have no
// flag in the v2.14 CLI).
type AppSpec struct {
	Name, Path, Namespace string
	RepoURL               string      // "": the lab's git server (GitURL)
	Revision              string      // "": main
	Params                [][2]string // name, string value
}

// WriteAppFile writes the Application as YAML into the run dir and returns its path.
func (l *Lab) WriteAppFile(a AppSpec) (string, error) {
	var ps []map[string]any
	for _, p := range a.Params {
		ps = append(ps, map[string]any{"name": p[0], "string": p[1]})
	}
	plugin := map[string]any{"name": PluginName}
	if len(ps) > 0 {
		plugin["parameters"] = ps
	}
	app := map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": a.Name, "namespace": "argocd"},
		"spec": map[string]any{
			"project":     "default",
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": a.Namespace},
			"source":      map[string]any{"repoURL": l.GitURL, "targetRevision": "main", "path": a.Path, "plugin": plugin},
			"syncPolicy":  map[string]any{"syncOptions": []string{"CreateNamespace=true"}},
		},
	}
	if a.RepoURL != "" {
		app["spec"].(map[string]any)["source"].(map[string]any)["repoURL"] = a.RepoURL
	}
	if a.Revision != "" {
		app["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"] = a.Revision
	}
	b, err := yaml.Marshal(app)
	if err != nil {
		return "", err
	}
	f := filepath.Join(l.Dir, "tmp", "app-"+a.Name+".yaml")
	return f, os.WriteFile(f, b, 0o644)
}

// LogLines returns the lines of a process's log that contain every one of subs.
func (l *Lab) LogLines(name string, subs ...string) []string {
	b, _ := os.ReadFile(filepath.Join(l.Logs, name+".log"))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

// ErrNotYet is what a wait's predicate returns while it waits.
var ErrNotYet = errors.New("not yet")
