package argocde2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	webRepo   = DemoHost + "/demo/web"
	batchRepo = DemoHost + "/demo/batch"
	apiRepo   = DemoHost + "/demo/api"

	annResolved = "argocd-image-resolver/resolved"
	annSkipped  = "argocd-image-resolver/skipped"
	annStale    = "argocd-image-resolver/stale"
)

// TestArgoCD runs the same scenarios against each Argo CD version of
// e2e/build/versions.txt, each version on its own control plane (in parallel).
func TestArgoCD(t *testing.T) {
	versions, err := Versions(paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			if os.Getenv("E2E_SERIAL") == "" {
				t.Parallel()
			}
			lab := startLab(t, v)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) { sc.run(t, lab) })
			}
		})
	}
}

// scenarios run in this order on one control plane; each has its own Applications,
// except that the refresh scenarios reuse "demo", which the first one syncs. The
// scenario that pushes new tags comes last: the tags change what later renders pick.
var scenarios = []struct {
	name string
	run  func(*testing.T, *Lab)
}{
	{"create-manifests-diff-sync", testCreateManifestsDiffSync},
	{"parameters-announcement", testParametersAnnouncement},
	{"sample-apps", testSampleApps},
	{"fidelity", testFidelity},
	{"pod-security-restricted", testPodSecurityRestricted},
	{"kustomize-remote-base", testKustomizeRemoteBase},
	{"policy-from-parameters", testPolicyFromParameters},
	{"applicationset", testApplicationSet},
	{"errors", testErrors},
	{"registry-down", testRegistryDown},
	{"daemon-unreachable", testDaemonUnreachable},
	{"new-tag-refresh", testNewTagRefresh},
	{"pins-in-git", testPinsInGit},
	{"pins-by-pull-request", testPinsByPullRequest},
	{"signed-tags", testSignedTags},
	{"render-latency", testRenderLatency},
	// With the sidecar as shipped (its TTLs), restored after each.
	{"registry-webhooks", testRegistryWebhooks},
	{"hard-refresh-by-hand", testHardRefreshByHand},
}

// ---------------------------------------------------------------------------------
// helpers

func createApp(t *testing.T, lab *Lab, name, path, ns string) {
	t.Helper()
	r := lab.Run("", "argocd", "app", "create", name, "--repo", lab.GitURL, "--path", path, "--revision", "main",
		"--dest-server", "https://kubernetes.default.svc", "--dest-namespace", ns,
		"--config-management-plugin", PluginName, "--sync-option", "CreateNamespace=true")
	if r.Code != 0 {
		t.Fatalf("%s", r)
	}
}

func createAppFromFile(t *testing.T, lab *Lab, a AppSpec) {
	t.Helper()
	f, err := lab.WriteAppFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if r := lab.Run("", "argocd", "app", "create", "-f", f); r.Code != 0 {
		t.Fatalf("%s", r)
	}
}

func waitApp(t *testing.T, lab *Lab, name, what string, ok func(*Application) error) *Application {
	t.Helper()
	a, err := lab.WaitApp(name, 120*time.Second, what, ok)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitCompared waits for the first comparison and requires no condition at all.
func waitCompared(t *testing.T, lab *Lab, name string) *Application {
	t.Helper()
	a := waitApp(t, lab, name, "compared", Compared)
	if len(a.Status.Conditions) > 0 {
		t.Fatalf("app %s has conditions:\n%s", name, a.ConditionsText())
	}
	return a
}

func manifests(t *testing.T, lab *Lab, name string) Objects {
	t.Helper()
	objs, err := lab.Manifests(name)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func get(t *testing.T, objs Objects, key string) Object {
	t.Helper()
	o, err := objs.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func wantImages(t *testing.T, where string, o Object, want ...string) {
	t.Helper()
	if got := o.Images(); !slices.Equal(got, want) {
		t.Errorf("%s: %s/%s images = %q, want %q", where, o.Kind(), o.Name(), got, want)
	}
}

// wantAnnotation: the object's annotation key is exactly want ("" = absent).
func wantAnnotation(t *testing.T, o Object, key, want string) {
	t.Helper()
	if got := o.Annotation(key); got != want {
		t.Errorf("%s/%s: annotation %s = %q, want %q", o.Kind(), o.Name(), key, got, want)
	}
}

const (
	// The annotations of plain-cron's objects with the policy file and the sidecar's
	// default platform.
	plainWebResolved   = "web=" + webRepo + ":1.1.0 (semver 1.x; platforms linux/amd64)"
	plainWebSkipped    = "web=" + webRepo + ":1.2.0: no manifest for linux/amd64 (has linux/arm64)"
	plainBatchResolved = "batch=" + batchRepo + ":12 (numeric; platforms linux/amd64)"
)

func syncApp(t *testing.T, lab *Lab, name string) {
	t.Helper()
	if r := lab.Run("", "argocd", "app", "sync", name, "--timeout", "120"); r.Code != 0 {
		t.Fatalf("%s", r)
	}
	waitApp(t, lab, name, "Synced after sync", SyncStatus("Synced"))
}

func live(t *testing.T, lab *Lab, ns, kind, name string) Object {
	t.Helper()
	o, err := lab.LiveObject(ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// diff runs `argocd app diff` and checks its exit code (0: no difference, 1: some).
func diff(t *testing.T, lab *Lab, wantCode int, args ...string) string {
	t.Helper()
	r := lab.Run("", append([]string{"argocd", "app", "diff"}, args...)...)
	if r.Code != wantCode {
		t.Fatalf("exit code %d, want %d:\n%s", r.Code, wantCode, r)
	}
	return r.Stdout
}

// cliMessage is what the argocd CLI said on stderr: v3 writes its fatal error as a
// JSON log line ({"level":"fatal","msg":"..."}), v2 as a logrus text line
// (time=... level=fatal msg="...").
func cliMessage(stderr string) string {
	var b strings.Builder
	for _, line := range strings.Split(stderr, "\n") {
		var m struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg != "" {
			line = m.Msg
		} else if _, rest, ok := strings.Cut(line, " msg="); ok {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				line, _ = strconv.Unquote(q)
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func hardRefresh(t *testing.T, lab *Lab, name string) {
	t.Helper()
	if r := lab.Run("", "argocd", "app", "get", name, "--hard-refresh"); r.Code != 0 {
		t.Fatalf("%s", r)
	}
}

// ---------------------------------------------------------------------------------
// scenarios

// testCreateManifestsDiffSync: the user's path with the policy in the repository's
// .argocd-image-resolver.yaml (plain-cron: web semver 1.x, batch numeric; the
// sidecar's default platform is linux/amd64, so web's arm64-only 1.2.0 is skipped).
func testCreateManifestsDiffSync(t *testing.T, lab *Lab) {
	createApp(t, lab, "demo", "apps/plain-cron", "demo")
	a := waitCompared(t, lab, "demo")
	if a.Status.Sync.Status != "OutOfSync" {
		t.Errorf("sync status before the first sync = %q, want OutOfSync", a.Status.Sync.Status)
	}
	if a.Spec.Source.Plugin == nil || a.Spec.Source.Plugin.Name != PluginName {
		t.Errorf("spec.source.plugin = %+v, want name %s", a.Spec.Source.Plugin, PluginName)
	}

	objs := manifests(t, lab, "demo")
	web := get(t, objs, "Deployment/web")
	wantImages(t, "argocd app manifests", web, webRepo+":1.1.0", webRepo+":1.1.0")
	wantAnnotation(t, web, annResolved, plainWebResolved)
	wantAnnotation(t, web, annSkipped, plainWebSkipped)
	wantAnnotation(t, web, annStale, "")
	cron := get(t, objs, "CronJob/nightly-report")
	wantImages(t, "argocd app manifests", cron, batchRepo+":12")
	wantAnnotation(t, cron, annResolved, plainBatchResolved)
	wantAnnotation(t, cron, annSkipped, "")
	get(t, objs, "Service/web") // objects without images pass through

	out := diff(t, lab, 1, "demo")
	if !strings.Contains(out, "image: "+webRepo+":1.1.0") {
		t.Errorf("argocd app diff before sync does not show the resolved image:\n%s", out)
	}

	syncApp(t, lab, "demo")
	liveWeb := live(t, lab, "demo", "deployment", "web")
	wantImages(t, "kubectl get deployment web", liveWeb, webRepo+":1.1.0", webRepo+":1.1.0")
	wantAnnotation(t, liveWeb, annResolved, plainWebResolved)
	wantAnnotation(t, liveWeb, annSkipped, plainWebSkipped)
	wantImages(t, "kubectl get cronjob nightly-report", live(t, lab, "demo", "cronjob", "nightly-report"), batchRepo+":12")
	diff(t, lab, 0, "demo")

	// The render-time preview from a working copy: the CLI tars it, repo-server runs the
	// plugin on it (revision "streamed"). An unchanged copy has no diff; a policy edit
	// (web ~1.0) shows the tag it would give.
	work := filepath.Join(lab.Dir, "tmp", "preview-work")
	if err := copyDir(filepath.Join(lab.GitWork, "apps"), filepath.Join(work, "apps")); err != nil {
		t.Fatal(err)
	}
	diff(t, lab, 0, "demo", "--local", work, "--server-side-generate")
	pol := filepath.Join(work, "apps", "plain-cron", ".argocd-image-resolver.yaml")
	b, err := os.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pol, []byte(strings.Replace(string(b), `constraint: "1.x"`, `constraint: "~1.0"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out = diff(t, lab, 1, "demo", "--local", work, "--server-side-generate")
	if !strings.Contains(out, webRepo+":1.0.0") || !strings.Contains(out, webRepo+":1.1.0") {
		t.Errorf("argocd app diff --local --server-side-generate with web ~1.0 does not show 1.1.0 -> 1.0.0:\n%s", out)
	}
}

// testParametersAnnouncement: the Parameters tab's announcement, through argocd-server
// (appdetails), repo-server's GetAppDetails and the plugin's parameters.dynamic command.
func testParametersAnnouncement(t *testing.T, lab *Lab) {
	typ, params, err := lab.AppDetails("demo", "apps/plain-cron")
	if err != nil {
		t.Fatal(err)
	}
	if typ != "Plugin" {
		t.Errorf("appdetails type = %q, want Plugin", typ)
	}
	byName := map[string]ParameterAnnouncement{}
	var names []string
	for _, p := range params {
		byName[p.Name] = p
		names = append(names, p.Name)
	}
	if got := byName["image-list"].Array; !slices.Equal(got, []string{"batch=" + batchRepo, "web=" + webRepo + ":1.x"}) {
		t.Errorf("image-list announced as %q, want the policy file's images", got)
	}
	for _, n := range []string{"update-strategy", "platforms", "web.update-strategy", "web.platforms", "batch.update-strategy", "pin-mode"} {
		if _, ok := byName[n]; !ok {
			t.Errorf("parameter %s not announced; announced: %v", n, names)
		}
	}
	if got := byName["web.update-strategy"].String; got != "semver" {
		t.Errorf("web.update-strategy announced with %q, want the policy file's semver", got)
	}
	if got := byName["batch.update-strategy"].String; got != "numeric" {
		t.Errorf("batch.update-strategy announced with %q, want the policy file's numeric", got)
	}
}

// testSampleApps: every app of testdata/apps, policy from its own file, created,
// rendered, synced.
func testSampleApps(t *testing.T, lab *Lab) {
	cases := []struct {
		app, path, ns string
		want          map[string][]string // "Kind/name" -> images
		resolved      map[string]string   // "Kind/name" -> the resolved annotation
		skipped       map[string]string   // "Kind/name" -> the skipped annotation ("" none)
	}{
		{
			app: "helm-web", path: "apps/helm-web", ns: "helm-web",
			want:     map[string][]string{"Deployment/helm-web": {webRepo + ":1.1.0"}},
			resolved: map[string]string{"Deployment/helm-web": "web=" + webRepo + ":1.1.0 (semver ^1.0; platforms linux/amd64)"},
			skipped:  map[string]string{"Deployment/helm-web": plainWebSkipped},
		},
		{
			app: "kustomize-overlay", path: "apps/kustomize-overlay/overlay", ns: "shop",
			want:     map[string][]string{"Deployment/api": {apiRepo + ":1.4.2"}},
			resolved: map[string]string{"Deployment/api": "api=" + apiRepo + ":1.4.2 (semver >=1.0.0 <2.0.0; platforms linux/amd64)"},
		},
		{
			app: "plain-cron", path: "apps/plain-cron", ns: "plain-cron",
			want: map[string][]string{
				"Deployment/web":         {webRepo + ":1.1.0", webRepo + ":1.1.0"},
				"CronJob/nightly-report": {batchRepo + ":12"},
			},
			resolved: map[string]string{"Deployment/web": plainWebResolved, "CronJob/nightly-report": plainBatchResolved},
			skipped:  map[string]string{"Deployment/web": plainWebSkipped},
		},
		{
			app: "arm64-pinned", path: "apps/arm64-pinned", ns: "arm64",
			want:     map[string][]string{"Deployment/web-arm": {webRepo + ":1.2.0"}},
			resolved: map[string]string{"Deployment/web-arm": "web=" + webRepo + ":1.2.0 (semver ^1.0; platforms linux/arm64)"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.app, func(t *testing.T) {
			createApp(t, lab, tc.app, tc.path, tc.ns)
			waitCompared(t, lab, tc.app)
			objs := manifests(t, lab, tc.app)
			for key, want := range tc.want {
				o := get(t, objs, key)
				wantImages(t, "argocd app manifests", o, want...)
				wantAnnotation(t, o, annResolved, tc.resolved[key])
				wantAnnotation(t, o, annSkipped, tc.skipped[key])
				wantAnnotation(t, o, annStale, "")
				if o.Namespace() != "" && o.Namespace() != tc.ns {
					t.Errorf("%s rendered in namespace %q, want %q", key, o.Namespace(), tc.ns)
				}
			}
			syncApp(t, lab, tc.app)
			for key, want := range tc.want {
				kind, name, _ := strings.Cut(key, "/")
				wantImages(t, "kubectl get", live(t, lab, tc.ns, strings.ToLower(kind), name), want...)
			}
			diff(t, lab, 0, tc.app)
		})
	}
}

// testKustomizeRemoteBase: an overlay whose base is a git URL on the lab's git
// server, which the sidecar allows (IMAGE_RESOLVER_KUSTOMIZE_REMOTE_HOSTS): Argo
// CD's render through the plugin fetches the base at its ref and resolves its
// image as for the vendored overlay; a base on a host not allowed is refused with
// the setting named in the app's condition.
func testKustomizeRemoteBase(t *testing.T, lab *Lab) {
	work := lab.GitWork
	policy, err := os.ReadFile(filepath.Join(work, "apps", "kustomize-overlay", "overlay", ".argocd-image-resolver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"apps/remote-base/.argocd-image-resolver.yaml": string(policy),
		"apps/remote-base/kustomization.yaml":          "namespace: shop-remote\nresources:\n- " + lab.GitURL + "//apps/kustomize-overlay/base?ref=main\n",
		"apps/remote-refused/kustomization.yaml":       "resources:\n- https://github.com/example/base//deploy?ref=v1\n",
	}
	commitApp(t, lab, "apps with remote bases", files)

	createApp(t, lab, "remote-base", "apps/remote-base", "shop-remote")
	waitCompared(t, lab, "remote-base")
	api := get(t, manifests(t, lab, "remote-base"), "Deployment/api")
	wantImages(t, "argocd app manifests", api, apiRepo+":1.4.2")
	wantAnnotation(t, api, annResolved, "api="+apiRepo+":1.4.2 (semver >=1.0.0 <2.0.0; platforms linux/amd64)")
	syncApp(t, lab, "remote-base")
	wantImages(t, "kubectl get", live(t, lab, "shop-remote", "deployment", "api"), apiRepo+":1.4.2")

	// Argo CD refuses to create an app that cannot render: applied as a resource.
	f, err := lab.WriteAppFile(AppSpec{Name: "remote-refused", Path: "apps/remote-refused", Namespace: "shop-remote"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.must("", "kubectl", "apply", "-f", f); err != nil {
		t.Fatal(err)
	}
	a := waitApp(t, lab, "remote-refused", "ComparisonError", HasCondition("ComparisonError"))
	if msg := a.Condition("ComparisonError"); !strings.Contains(msg, `resources entry "https://github.com/example/base//deploy?ref=v1": remote references are not fetched by the sidecar`) ||
		!strings.Contains(msg, "kustomizeRemoteHosts") {
		t.Errorf("ComparisonError of a base on a host not allowed: %q", msg)
	}
}

// testPolicyFromParameters: the policy as plugin parameters in the Application (no
// CLI flag for them in v2.14: `argocd app create -f`); parameters win over the
// repository's file field by field.
func testPolicyFromParameters(t *testing.T, lab *Lab) {
	// plain-cron with web=~1.2 on linux/arm64: the arm64-only 1.2.0; batch still from the file.
	createAppFromFile(t, lab, AppSpec{Name: "params", Path: "apps/plain-cron", Namespace: "params", Params: [][2]string{
		{"image-list", "web=" + webRepo + ":~1.2"},
		{"web.platforms", "linux/arm64"},
	}})
	waitCompared(t, lab, "params")
	objs := manifests(t, lab, "params")
	web := get(t, objs, "Deployment/web")
	wantImages(t, "argocd app manifests", web, webRepo+":1.2.0", webRepo+":1.2.0")
	wantAnnotation(t, web, annResolved, "web="+webRepo+":1.2.0 (semver ~1.2; platforms linux/arm64)")
	wantAnnotation(t, web, annSkipped, "")
	wantImages(t, "argocd app manifests", get(t, objs, "CronJob/nightly-report"), batchRepo+":12")
	syncApp(t, lab, "params")
	wantImages(t, "kubectl get deployment web", live(t, lab, "params", "deployment", "web"), webRepo+":1.2.0", webRepo+":1.2.0")

	// The app as Argo CD stored it carries the parameters.
	out, err := lab.must("", "kubectl", "-n", "argocd", "get", "application", "params", "-o", "jsonpath={.spec.source.plugin.parameters[*].name}")
	if err != nil {
		t.Fatal(err)
	}
	if out != "image-list web.platforms" {
		t.Errorf("stored parameters = %q", out)
	}

	// The Helm chart on linux/amd64 from a parameter, strategy from the file.
	createAppFromFile(t, lab, AppSpec{Name: "helm-amd64", Path: "apps/helm-web", Namespace: "helm-amd64", Params: [][2]string{
		{"web.platforms", "linux/amd64"},
		{"web.allow-tags", "regexp:^1\\.0\\."},
	}})
	waitCompared(t, lab, "helm-amd64")
	dep := get(t, manifests(t, lab, "helm-amd64"), "Deployment/helm-amd64-web")
	wantImages(t, "argocd app manifests", dep, webRepo+":1.0.0")
	// The annotation says allow-tags narrowed the choice (1.1.0 exists for amd64).
	wantAnnotation(t, dep, annResolved, "web="+webRepo+":1.0.0 (semver ^1.0; allow-tags regexp:^1\\.0\\.; platforms linux/amd64)")
}

// testErrors: what a user sees when the plugin cannot render: `argocd app create`
// refuses the app (it validates the spec by rendering it) with the plugin's message,
// and the same Application applied without that check (as from git, app of apps)
// shows the message as its ComparisonError.
func testErrors(t *testing.T, lab *Lab) {
	cases := []struct {
		name   string
		params [][2]string
		want   string // the plugin's message, in the CLI's error and the ComparisonError
	}{
		{"bad-parameter", [][2]string{{"web.update-strategy", "newest"}},
			`argocd-image-resolver: parameter "web.update-strategy": invalid value "newest" (accepted: semver (default), newest-build, digest, alphabetical, numeric (old names: latest, name))`},
		{"no-tag-qualifies", [][2]string{{"image-list", "web=" + webRepo + ":~9.0"}},
			`argocd-image-resolver: image web (used by Deployment.apps/web): registry.demo.local/demo/web: no tag qualifies: none of 5 tags is a semantic version within "~9.0"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := lab.WriteAppFile(AppSpec{Name: tc.name, Path: "apps/plain-cron", Namespace: tc.name, Params: tc.params})
			if err != nil {
				t.Fatal(err)
			}
			r := lab.Run("", "argocd", "app", "create", "-f", f)
			if msg := cliMessage(r.Stderr); r.Code != 20 || !strings.Contains(msg, "InvalidSpecError") || !strings.Contains(msg, tc.want) {
				t.Errorf("argocd app create -f: want exit 20, InvalidSpecError and the plugin's message %q; got:\n%s", tc.want, r)
			}
			if _, err := lab.must("", "kubectl", "apply", "-f", f); err != nil {
				t.Fatal(err)
			}
			a := waitApp(t, lab, tc.name, "ComparisonError", HasCondition("ComparisonError"))
			if msg := a.Condition("ComparisonError"); !strings.Contains(msg, tc.want) {
				t.Errorf("ComparisonError does not carry the plugin's message %q:\n%s", tc.want, msg)
			}
			// Never a partial render: either the plugin's message or nothing at all.
			switch r := lab.Run("", "argocd", "app", "manifests", tc.name); {
			case r.Code != 0 && strings.Contains(cliMessage(r.Stderr), tc.want):
				t.Logf("argocd app manifests: exit %d with the plugin's message", r.Code)
			case r.Code == 0 && strings.TrimSpace(r.Stdout) == "":
				t.Logf("argocd app manifests: exit 0 and no output")
			default:
				t.Errorf("argocd app manifests of a failing app: want an error with %q or nothing, got:\n%s", tc.want, r)
			}
		})
	}
}

// testRegistryDown: warm (the daemon has answers): renders from stale, annotated;
// cold (a new daemon, nothing cached): the ComparisonError names the registry.
func testRegistryDown(t *testing.T, lab *Lab) {
	waitApp(t, lab, "demo", "Synced", SyncStatus("Synced"))
	lab.Proxy.Down()
	defer func() {
		if err := lab.Proxy.Up(); err != nil {
			t.Fatal(err)
		}
	}()
	time.Sleep(1500 * time.Millisecond) // past the sidecar's 1s TTLs

	t.Run("warm", func(t *testing.T) {
		hardRefresh(t, lab, "demo")
		a := waitApp(t, lab, "demo", "compared", Compared)
		if c := a.ConditionsText(); c != "" {
			t.Errorf("conditions with a warm cache: %s", c)
		}
		objs := manifests(t, lab, "demo")
		web := get(t, objs, "Deployment/web")
		wantImages(t, "argocd app manifests", web, webRepo+":1.1.0", webRepo+":1.1.0")
		wantAnnotation(t, web, annStale, "web")
		wantAnnotation(t, get(t, objs, "CronJob/nightly-report"), annStale, "batch")
	})

	t.Run("cold", func(t *testing.T) {
		if err := lab.RestartSidecar(); err != nil {
			t.Fatal(err)
		}
		hardRefresh(t, lab, "demo")
		a := waitApp(t, lab, "demo", "ComparisonError", HasCondition("ComparisonError"))
		msg := a.Condition("ComparisonError")
		// The image is named as written, with the address contacted (registries.yaml's
		// api for registry.demo.local), once per image.
		p := lab.Proxy.Addr
		for _, want := range []string{
			`image web (used by Deployment.apps/web): list tags of registry.demo.local/demo/web (via ` + p + `): Get "https://` + p + `/v2/": dial tcp ` + p + `: connect: connection refused; Get "http://` + p + `/v2/": dial tcp ` + p + `: connect: connection refused`,
			`image batch (used by CronJob.batch/nightly-report): list tags of registry.demo.local/demo/batch (via ` + p + `): `,
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("ComparisonError does not say %q:\n%s", want, msg)
			}
		}
	})

	t.Run("back", func(t *testing.T) {
		if err := lab.Proxy.Up(); err != nil {
			t.Fatal(err)
		}
		hardRefresh(t, lab, "demo")
		waitApp(t, lab, "demo", "Synced, no condition", func(a *Application) error {
			if err := SyncStatus("Synced")(a); err != nil {
				return err
			}
			if len(a.Status.Conditions) > 0 {
				return ErrNotYet
			}
			return nil
		})
		wantAnnotation(t, get(t, manifests(t, lab, "demo"), "Deployment/web"), annStale, "")
	})
}

// testDaemonKilled: the daemon (the sidecar's main process) dies, argocd-cmp-server
// testDaemonUnreachable: the daemon's socket cannot be reached (moved away while
// the daemon and the CMP server live on): renders fall back to resolving in-process,
// with the same configuration, and give the same manifests. (The daemon cannot die
// alone: it is the sidecar's own process, and the CMP server dies with it.)
func testDaemonUnreachable(t *testing.T, lab *Lab) {
	before := len(lab.LogLines("sidecar", "daemon unreachable"))
	socket := lab.DaemonSocket()
	if err := os.Rename(socket, socket+".away"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.Rename(socket+".away", socket); err != nil {
			t.Fatal(err)
		}
	}()
	hardRefresh(t, lab, "demo")
	a := waitApp(t, lab, "demo", "compared", Compared)
	if c := a.ConditionsText(); c != "" {
		t.Errorf("conditions without the daemon: %s", c)
	}
	if a.Status.Sync.Status != "Synced" {
		t.Errorf("sync status without the daemon = %q, want Synced (the same render)", a.Status.Sync.Status)
	}
	web := get(t, manifests(t, lab, "demo"), "Deployment/web")
	wantImages(t, "argocd app manifests", web, webRepo+":1.1.0", webRepo+":1.1.0")
	if after := len(lab.LogLines("sidecar", "daemon unreachable")); after <= before {
		t.Errorf("no new \"daemon unreachable\" line in the sidecar's log (the cmp-server logs generate's stderr)")
	}
}

// testNewTagRefresh: a new tag in the registry reaches the app by itself. The
// sidecar's refresh loop sees the new answer once the tag list expires and sets
// argocd.argoproj.io/refresh=hard on the Application; the controller renders again
// and the app turns OutOfSync with the image change, with no CLI involved. An app
// with the parameter refresh=off keeps its cached render (a normal refresh reuses
// repo-server's cache) until a hard refresh.
func testNewTagRefresh(t *testing.T, lab *Lab) {
	waitApp(t, lab, "demo", "Synced", SyncStatus("Synced"))
	requested0, err := lab.MetricValue(metricRequested)
	if err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	if err := lab.SeedTag("demo/web", "1.4.0"); err != nil {
		t.Fatal(err)
	}
	waitApp(t, lab, "demo", "OutOfSync by itself after a new tag", SyncStatus("OutOfSync"))
	took := time.Since(pushed)
	t.Logf("new tag pushed -> app OutOfSync with it, no human action: %s (tag TTL 1s, a pass every 1s, refresh interval 10s, reconciliation 600s)", took.Round(100*time.Millisecond))
	web := get(t, manifests(t, lab, "demo"), "Deployment/web")
	wantImages(t, "argocd app manifests", web, webRepo+":1.4.0", webRepo+":1.4.0")
	wantAnnotation(t, web, annResolved, "web="+webRepo+":1.4.0 (semver 1.x; platforms linux/amd64)")
	wantAnnotation(t, web, annSkipped, "")
	if a, err := lab.App("demo"); err != nil {
		t.Fatal(err)
	} else if a.Status.Sync.Status != "OutOfSync" {
		t.Errorf("argocd app get: sync status %q, want OutOfSync", a.Status.Sync.Status)
	}
	if out := diff(t, lab, 1, "demo"); !strings.Contains(out, webRepo+":1.4.0") {
		t.Errorf("argocd app diff does not show 1.4.0:\n%s", out)
	}
	// One refresh per app whose answer changed: demo, and the other apps on demo/web
	// the daemon watches (restored after the restarts above), each once.
	refreshed := map[string]int{}
	for _, line := range lab.LogLines("sidecar", "refresh requested", "new="+webRepo+":1.4.0 ") {
		if i := strings.Index(line, "application="); i >= 0 {
			app, _, _ := strings.Cut(line[i+len("application="):], " ")
			refreshed[app]++
		}
	}
	total := 0
	for app, n := range refreshed {
		total += n
		if n != 1 {
			t.Errorf("%s refreshed %d times for one change, want once", app, n)
		}
	}
	if refreshed["argocd/demo"] != 1 {
		t.Errorf("refreshes for 1.4.0 %v, want argocd/demo among them", refreshed)
	}
	if got, _ := lab.MetricValue(metricRequested); got != requested0+float64(total) {
		t.Errorf("%s = %v, want %v (the refreshes logged: %v)", metricRequested, got, requested0+float64(total), refreshed)
	}
	t.Logf("refreshed for 1.4.0: %v", refreshed)
	syncApp(t, lab, "demo")
	wantImages(t, "kubectl get deployment web", live(t, lab, "demo", "deployment", "web"), webRepo+":1.4.0", webRepo+":1.4.0")

	// An app that opted out follows the cache, as without the loop.
	createAppFromFile(t, lab, AppSpec{Name: "demo-quiet", Path: "apps/plain-cron", Namespace: "demo-quiet", Params: [][2]string{{"refresh", "off"}}})
	waitCompared(t, lab, "demo-quiet")
	wantImages(t, "demo-quiet before the push", get(t, manifests(t, lab, "demo-quiet"), "Deployment/web"), webRepo+":1.4.0", webRepo+":1.4.0")
	if err := lab.SeedTag("demo/web", "1.5.0"); err != nil {
		t.Fatal(err)
	}
	waitApp(t, lab, "demo", "OutOfSync by itself after the second tag", SyncStatus("OutOfSync"))
	wantImages(t, "demo after the second tag", get(t, manifests(t, lab, "demo"), "Deployment/web"), webRepo+":1.5.0", webRepo+":1.5.0")
	if r := lab.Run("", "argocd", "app", "get", "demo-quiet", "--refresh"); r.Code != 0 {
		t.Fatalf("%s", r)
	}
	wantImages(t, "demo-quiet after a normal refresh", get(t, manifests(t, lab, "demo-quiet"), "Deployment/web"), webRepo+":1.4.0", webRepo+":1.4.0")
	if a, err := lab.App("demo-quiet"); err != nil {
		t.Fatal(err)
	} else if _, ok := a.Metadata.Annotations["argocd.argoproj.io/refresh"]; ok {
		t.Errorf("demo-quiet (refresh: off) got a refresh annotation")
	}
	hardRefresh(t, lab, "demo-quiet")
	wantImages(t, "demo-quiet after --hard-refresh", get(t, manifests(t, lab, "demo-quiet"), "Deployment/web"), webRepo+":1.5.0", webRepo+":1.5.0")
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/demo-quiet "); len(lines) != 0 {
		t.Errorf("demo-quiet (refresh: off) was refreshed: %q", lines)
	}
	syncApp(t, lab, "demo")
	wantImages(t, "kubectl get deployment web", live(t, lab, "demo", "deployment", "web"), webRepo+":1.5.0", webRepo+":1.5.0")
}

// testRenderLatency measures renders as Argo CD sees them (its own logs: the
// cmp-server's GenerateManifest stream, repo-server's GenerateManifest call) with the
// daemon warm: the sidecar restarted with its default TTLs (2m), one hard refresh to
// fill its cache, then hard refreshes that render again from the warm daemon. It also
// reports every render of the whole run (TTLs 1s, so the daemon was mostly cold).
func testRenderLatency(t *testing.T, lab *Lab) {
	const cmpSvc, repoSvc = "plugin.ConfigManagementPluginService", "repository.RepoServerService"
	times := func(log, svc string) []time.Duration {
		return GRPCTimes(lab.LogLines(log, `"GenerateManifest"`, svc))
	}
	allCmp, allRepo := times("sidecar", cmpSvc), times("repo-server", repoSvc)
	if len(allCmp) == 0 || len(allRepo) == 0 {
		t.Fatalf("no GenerateManifest timings in sidecar.log (%d) or repo-server.log (%d)", len(allCmp), len(allRepo))
	}
	t.Logf("whole run, 1s TTLs: cmp-server renders %s; repo-server manifest requests (cache hits included) %s", Summary(allCmp), Summary(allRepo))

	ttls := lab.SidecarTTLs
	lab.SidecarTTLs = []string{"--tag-ttl", "2m", "--head-ttl", "2m"}
	defer func() { lab.SidecarTTLs = ttls }()
	if err := lab.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
	cmp0, repo0 := len(times("sidecar", cmpSvc)), len(times("repo-server", repoSvc))
	hardRefresh(t, lab, "demo") // cold daemon
	cmp1, repo1 := len(times("sidecar", cmpSvc)), len(times("repo-server", repoSvc))
	const warm = 5
	for range warm {
		hardRefresh(t, lab, "demo")
	}
	cmp, repo := times("sidecar", cmpSvc), times("repo-server", repoSvc)
	if len(cmp)-cmp1 < warm {
		t.Fatalf("%d hard refreshes made %d renders", warm, len(cmp)-cmp1)
	}
	t.Logf("daemon cold: cmp-server render %s; repo-server GenerateManifest %s", Summary(cmp[cmp0:cmp1]), Summary(repo[repo0:repo1]))
	t.Logf("daemon warm: cmp-server render %s; repo-server GenerateManifest %s", Summary(cmp[cmp1:]), Summary(repo[repo1:]))
	// The restarted daemon restored its watch list ("demo" and the other apps
	// rendered before, not a pin-mode use app): nothing is news, so no refresh (no
	// storm after a restart), and the renders above add no app.
	wantMetric(t, lab, metricRequested, 0)
	restored := lab.LogLines("sidecar", "watch list restored")
	if len(restored) == 0 {
		t.Fatal("the restarted daemon did not log its watch list restored")
	}
	var apps float64
	if _, err := fmt.Sscanf(restored[len(restored)-1][strings.Index(restored[len(restored)-1], "apps="):], "apps=%g", &apps); err != nil || apps < 1 {
		t.Fatalf("watch list restored: %q (%v)", restored[len(restored)-1], err)
	}
	wantMetric(t, lab, metricTracked, apps)
	a := waitApp(t, lab, "demo", "compared", Compared)
	if c := a.ConditionsText(); c != "" {
		t.Errorf("conditions: %s", c)
	}
	// What the resolver counted for those renders (its /metrics): one ping per
	// registry, then tags and manifests from its cache.
	out, err := lab.Metrics("argocd_image_resolver_registry_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resolver's registry requests since its restart:\n%s", out)
}
