// Package deploy holds the Kustomize component that installs argocd-image-resolver;
// this test builds it the way a user's kustomization would.
package deploy

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"
)

func TestComponentBuilds(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), "../testdata/deploy/install")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var repoServer struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name         string   `json:"name"`
						Command      []string `json:"command"`
						VolumeMounts []struct {
							Name      string `json:"name"`
							MountPath string `json:"mountPath"`
						} `json:"volumeMounts"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	var configMap struct {
		Data map[string]string `json:"data"`
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		switch {
		case strings.Contains(doc, "kind: Deployment"):
			if err := yaml.Unmarshal([]byte(doc), &repoServer); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(doc, "kind: ConfigMap"):
			if err := yaml.Unmarshal([]byte(doc), &configMap); err != nil {
				t.Fatal(err)
			}
		}
	}
	containers := repoServer.Spec.Template.Spec.Containers
	names := map[string]int{}
	for i, c := range containers {
		names[c.Name] = i
	}
	sidecar, ok := names["image-resolver"]
	if _, repo := names["argocd-repo-server"]; len(containers) != 2 || !ok || !repo {
		t.Fatalf("containers = %+v, want repo-server and the image-resolver sidecar", containers)
	}
	mounts := map[string]string{}
	for _, m := range containers[sidecar].VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	// The paths Argo CD's CMP server relies on (DESIGN.md section 10).
	for path, volume := range map[string]string{
		"/var/run/argocd": "var-files", "/home/argocd/cmp-server/plugins": "plugins",
		"/home/argocd/cmp-server/config/plugin.yaml": "image-resolver-plugin", "/tmp": "image-resolver-tmp",
	} {
		if mounts[path] != volume {
			t.Errorf("mount %s = %q, want volume %q", path, mounts[path], volume)
		}
	}
	if cmd := strings.Join(containers[sidecar].Command, " "); cmd != "argocd-image-resolver sidecar -- /var/run/argocd/argocd-cmp-server" {
		t.Errorf("sidecar command %q does not run the daemon and Argo CD's cmp-server", cmd)
	}
	want, err := os.ReadFile("../plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if configMap.Data["plugin.yaml"] != string(want) {
		t.Errorf("deploy/plugin-configmap.yaml differs from plugin.yaml:\n%s\n---- want ----\n%s", configMap.Data["plugin.yaml"], want)
	}
}

// The objects the component adds to an Argo CD installation, by "Kind name"; anything
// else it added (a ClusterRole, a second binding) fails TestComponentOnArgoCD.
var componentObjects = []string{
	"ConfigMap argocd-image-resolver-plugin",
	"Role argocd-image-resolver",
	"RoleBinding argocd-image-resolver",
	"Service argocd-image-resolver-metrics",
	"Service argocd-image-resolver-webhooks",
}

// Where client-go's in-cluster configuration reads the token, CA and namespace.
const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// TestComponentOnArgoCD builds the component the way a user's kustomization does, on
// Argo CD's own install manifests (install.yaml, namespace-install.yaml and
// ha/namespace-install.yaml of every version e2e/build/versions.txt lists, from the
// Go module cache or the module proxy), into the usual namespace and another one, and
// checks the refresh loop's access to the Kubernetes API (the Role grants exactly get
// and patch on Applications, the RoleBinding gives it to the ServiceAccount the
// repo-server Deployment runs as, and, as Argo CD mounts no token into the repo-server
// pod, only the sidecar gets one) and the sidecar against what Argo CD and the daemon
// require (checkSidecarPod, checkMetricsService).
func TestComponentOnArgoCD(t *testing.T) {
	component := deployFiles(t)
	for _, version := range argoCDVersions(t) {
		manifests := argoCDManifests(t, version, "install.yaml", "namespace-install.yaml", "ha/namespace-install.yaml")
		// install.yaml (CRDs included: seconds to build) as most install it;
		// namespace-install.yaml, the same repo-server, also in another namespace;
		// the HA manifests' repo-server (replicas, anti-affinity).
		for _, c := range []struct{ manifest, namespace string }{
			{"install.yaml", "argocd"}, {"namespace-install.yaml", "argocd"}, {"namespace-install.yaml", "gitops"},
			{"ha/namespace-install.yaml", "argocd"},
		} {
			install := manifests[c.manifest]
			t.Run(version+"/"+c.manifest+"/"+c.namespace, func(t *testing.T) {
				t.Parallel()
				checkBuild(t, buildOn(t, component, install, c.namespace), install, c.namespace)
			})
		}
	}
}

// argoCDVersions reads the Argo CD versions the project supports.
func argoCDVersions(t *testing.T) []string {
	b, err := os.ReadFile("../e2e/build/versions.txt")
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			versions = append(versions, line)
		}
	}
	if len(versions) == 0 {
		t.Fatal("e2e/build/versions.txt lists no Argo CD version")
	}
	return versions
}

// argoCDManifests returns install manifests of Argo CD at version, read from its Go
// module's zip in the module cache (the go command downloads it through the module
// proxy if it is missing). The zip, not the extracted module: Argo CD 3.x's go.mod
// asks for a newer Go than may be installed, and then the go command downloads and
// verifies the zip but extracts nothing.
func argoCDManifests(t *testing.T, version string, names ...string) map[string][]byte {
	return argoCDManifestsEnv(t, version, nil, names...)
}

// argoCDManifestsEnv is argoCDManifests with env added to the go command's.
func argoCDManifestsEnv(t *testing.T, version string, env []string, names ...string) map[string][]byte {
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	mod := "github.com/argoproj/argo-cd/v" + major + "@" + version
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir() // outside this module: its go.mod does not require Argo CD
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS="), env...)
	out, _ := cmd.Output() // exits 1 for the go version; the zip is there all the same
	var info struct{ Zip, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Zip == "" {
		t.Fatalf("go mod download %s (Argo CD's install manifests; needs the module cache or the Go module proxy): %v %s", mod, err, out)
	}
	z, err := zip.OpenReader(info.Zip)
	if err != nil {
		t.Fatalf("go mod download %s: %s: %v", mod, info.Error, err)
	}
	defer z.Close()
	manifests := map[string][]byte{}
	for _, name := range names {
		f, err := z.Open(mod + "/manifests/" + name)
		if err != nil {
			t.Fatalf("%s: %v", info.Zip, err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		manifests[name] = b
	}
	return manifests
}

// deployFiles returns the files of deploy/ a kustomization reads (YAML and JSON, not
// the image's), by path relative to deploy/.
func deployFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "image" || path == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".json")) {
			return nil
		}
		b, err := os.ReadFile(path)
		files[filepath.ToSlash(path)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// buildOn builds, in memory, a user's kustomization: namespace, Argo CD's install
// manifest as a resource, this component.
func buildOn(t *testing.T, component map[string][]byte, install []byte, namespace string) resmap.ResMap {
	return buildWith(t, component, install, "namespace: "+namespace+"\nresources:\n  - install.yaml\ncomponents:\n  - ../deploy\n")
}

// buildWith builds, in memory, the kustomization text in /app beside Argo CD's
// install manifest (install.yaml), with deploy/'s files in /deploy.
func buildWith(t *testing.T, component map[string][]byte, install []byte, kustomization string) resmap.ResMap {
	t.Helper()
	return buildApp(t, component, map[string][]byte{"install.yaml": install, "kustomization.yaml": []byte(kustomization)})
}

// buildApp builds, in memory, the kustomization of the files app (by name, in /app:
// kustomization.yaml and what it names), with deploy/'s files in /deploy.
func buildApp(t *testing.T, component map[string][]byte, app map[string][]byte) resmap.ResMap {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	files := map[string][]byte{}
	for name, b := range app {
		files["/app/"+name] = b
	}
	for name, b := range component {
		files["/deploy/"+name] = b
	}
	for name, b := range files {
		if err := fs.WriteFile(name, b); err != nil {
			t.Fatal(err)
		}
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/app")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	return resMap
}

// object decodes the resource of kind and name into out; false if there is none.
func object(t *testing.T, resMap resmap.ResMap, kind, name string, out any) bool {
	t.Helper()
	for _, r := range resMap.Resources() {
		if r.GetKind() != kind || r.GetName() != name {
			continue
		}
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v", kind, name, err)
		}
		return true
	}
	return false
}

func checkBuild(t *testing.T, resMap resmap.ResMap, install []byte, namespace string) {
	// What the component adds, and nothing else.
	nodes, err := kio.FromBytes(install)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, n := range nodes {
		before[n.GetKind()+" "+n.GetName()] = true
	}
	var added []string
	for _, r := range resMap.Resources() {
		if id := r.GetKind() + " " + r.GetName(); !before[id] {
			added = append(added, id)
		}
	}
	slices.Sort(added)
	if !slices.Equal(added, componentObjects) {
		t.Errorf("the component adds %q, want %q", added, componentObjects)
	}

	var deploy appsv1.Deployment
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) {
		t.Fatal("no Deployment argocd-repo-server")
	}
	pod := deploy.Spec.Template.Spec
	sa := pod.ServiceAccountName
	if sa == "" {
		t.Fatal("the repo-server Deployment names no serviceAccountName: it would run as default")
	}
	if deploy.Namespace != namespace {
		t.Errorf("Deployment namespace %q, want %q", deploy.Namespace, namespace)
	}
	var account corev1.ServiceAccount
	if !object(t, resMap, "ServiceAccount", sa, &account) || account.Namespace != namespace {
		t.Errorf("no ServiceAccount %s/%s, which the repo-server Deployment runs as", namespace, sa)
	}

	// The Role: get and patch on applications.argoproj.io, nothing more.
	var role rbacv1.Role
	if !object(t, resMap, "Role", "argocd-image-resolver", &role) {
		t.Fatal("no Role argocd-image-resolver")
	}
	if role.Namespace != namespace {
		t.Errorf("Role namespace %q, want the control-plane namespace %q", role.Namespace, namespace)
	}
	checkRules(t, "Role "+role.Name, role.Rules)

	// The RoleBinding: that Role, to the ServiceAccount the Deployment runs as.
	var binding rbacv1.RoleBinding
	if !object(t, resMap, "RoleBinding", "argocd-image-resolver", &binding) {
		t.Fatal("no RoleBinding argocd-image-resolver")
	}
	if binding.Namespace != namespace {
		t.Errorf("RoleBinding namespace %q, want %q", binding.Namespace, namespace)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}); binding.RoleRef != want {
		t.Errorf("RoleBinding roleRef %+v, want %+v", binding.RoleRef, want)
	}
	if len(binding.Subjects) != 1 {
		t.Fatalf("RoleBinding subjects %+v, want the repo-server's ServiceAccount only", binding.Subjects)
	}
	// A ServiceAccount subject without a namespace is in the binding's.
	if s := binding.Subjects[0]; s.Kind != rbacv1.ServiceAccountKind || s.APIGroup != "" || s.Name != sa || (s.Namespace != "" && s.Namespace != namespace) {
		t.Errorf("RoleBinding subject %+v, want ServiceAccount %s/%s (the Deployment's serviceAccountName)", s, namespace, sa)
	}

	// The token: Argo CD mounts none into the repo-server pod, so the sidecar mounts
	// its own, and no other container has it.
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the repo-server pod's automountServiceAccountToken is %s, not false: every container, repo-server's own too, "+
			"gets a token with the refresh loop's access; revisit repo-server-sidecar.yaml", boolString(pod.AutomountServiceAccountToken))
	}
	var tokenVolume string
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if c.Name == "image-resolver" && m.MountPath == tokenDir {
				if !m.ReadOnly {
					t.Errorf("the sidecar's token mount is not read-only")
				}
				tokenVolume = m.Name
			} else if m.MountPath == tokenDir || strings.HasPrefix(m.MountPath, tokenDir+"/") || strings.Contains(m.Name, "kube-api-access") {
				t.Errorf("container %s mounts %s at %s: only the sidecar may hold the token", c.Name, m.Name, m.MountPath)
			}
		}
	}
	if tokenVolume == "" {
		t.Fatalf("the sidecar mounts nothing at %s: the refresh loop has no Kubernetes API", tokenDir)
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name == tokenVolume && c.Name != "image-resolver" {
				t.Errorf("container %s mounts the sidecar's token volume %s", c.Name, tokenVolume)
			}
		}
	}
	checkTokenVolume(t, pod.Volumes, tokenVolume)

	// Apps named without a namespace are in the pod's namespace.
	var sidecar *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "image-resolver" {
			sidecar = &pod.Containers[i]
		}
	}
	if sidecar == nil {
		t.Fatal("no image-resolver container")
	}
	var controlPlane *corev1.EnvVar
	for i, e := range sidecar.Env {
		if e.Name == "IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE" {
			controlPlane = &sidecar.Env[i]
		}
	}
	if controlPlane == nil || controlPlane.Value != "" || controlPlane.ValueFrom == nil || controlPlane.ValueFrom.FieldRef == nil ||
		controlPlane.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("sidecar env IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE = %+v, want the pod's metadata.namespace", controlPlane)
	}

	checkSidecarPod(t, &pod, configMapsOf(t, resMap), "argocd-repo-server")
	checkRestricted(t, "the component", repoServerOf(t, install), &deploy, sidecarName)
	checkDefaultContainer(t, "the component", &deploy.Spec.Template, "argocd-repo-server")
	// repo-server's own container is Argo CD's, untouched by the patch that names it.
	if want, got := repoServerOf(t, install).Spec.Template.Spec.Containers[0], pod.Containers[0]; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the component changed Argo CD's container %s:\n%+v\n---- want ----\n%+v", want.Name, got, want)
	}
	var svc corev1.Service
	if !object(t, resMap, "Service", "argocd-image-resolver-metrics", &svc) {
		t.Fatal("no Service argocd-image-resolver-metrics")
	}
	checkMetricsService(t, &svc, &deploy)
	var hooks corev1.Service
	if !object(t, resMap, "Service", webhookService, &hooks) {
		t.Fatalf("no Service %s", webhookService)
	}
	checkWebhooksOff(t, "the component", &hooks, &deploy, configMapsOf(t, resMap))
}

// configMapsOf returns the data of every ConfigMap of resMap, by name.
func configMapsOf(t *testing.T, resMap resmap.ResMap) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, r := range resMap.Resources() {
		if r.GetKind() != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if !object(t, resMap, "ConfigMap", r.GetName(), &cm) {
			t.Fatalf("ConfigMap %s", r.GetName())
		}
		out[cm.Name] = cm.Data
	}
	return out
}

func boolString(b *bool) string {
	if b == nil {
		return "unset"
	}
	return strconv.FormatBool(*b)
}

// checkRules checks that rules grant exactly get and patch on applications.argoproj.io.
func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	if len(rules) != 1 {
		t.Fatalf("%s rules %+v, want one: get, patch on applications.argoproj.io", what, rules)
	}
	r := rules[0]
	verbs := slices.Sorted(slices.Values(r.Verbs))
	if !slices.Equal(r.APIGroups, []string{"argoproj.io"}) || !slices.Equal(r.Resources, []string{"applications"}) ||
		!slices.Equal(verbs, []string{"get", "patch"}) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
		t.Errorf("%s rule %+v, want get, patch on applications.argoproj.io only", what, r)
	}
}

// checkTokenVolume checks the sidecar's token volume: what Kubernetes' own automount
// projects (a bounded ServiceAccount token, the cluster CA, the namespace), under the
// names client-go reads.
func checkTokenVolume(t *testing.T, volumes []corev1.Volume, name string) {
	t.Helper()
	i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 || volumes[i].Projected == nil {
		t.Fatalf("the sidecar's token volume %s is not a projected volume of the pod", name)
	}
	var token, ca, ns bool
	for _, s := range volumes[i].Projected.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			e := s.ServiceAccountToken.ExpirationSeconds
			// 3607 is what the API server may extend to a year; Kubernetes' minimum is 600.
			token = s.ServiceAccountToken.Path == "token" && s.ServiceAccountToken.Audience == "" &&
				e != nil && *e >= 600 && *e <= 3600
			if !token {
				t.Errorf("token source %+v, want path token, the API server's audience and 600 <= expirationSeconds <= 3600", s.ServiceAccountToken)
			}
		case s.ConfigMap != nil:
			ca = s.ConfigMap.Name == "kube-root-ca.crt" && len(s.ConfigMap.Items) == 1 &&
				s.ConfigMap.Items[0] == corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"}
		case s.DownwardAPI != nil:
			ns = len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].Path == "namespace" &&
				s.DownwardAPI.Items[0].FieldRef != nil && s.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace"
		}
	}
	if !token || !ca || !ns {
		t.Errorf("token volume %s: token %v, ca.crt from kube-root-ca.crt %v, namespace %v; want all three", name, token, ca, ns)
	}
}

// TestOptionalManifests checks the files deploy/ holds beside the component: the RBAC
// example for apps in any namespace grants what rbac.yaml grants, to the repo-server's
// ServiceAccount of the control-plane namespace; the admission policy is bound and
// matches that ServiceAccount; neither is part of the component.
func TestOptionalManifests(t *testing.T) {
	kustomization, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(kustomization, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(k.Resources, "rbac.yaml") {
		t.Errorf("kustomization.yaml resources %q do not include rbac.yaml", k.Resources)
	}
	docs := func(file string) [][]byte {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(k.Resources, file) {
			t.Errorf("%s is in the component's resources; it is an example applied on its own", file)
		}
		nodes, err := kio.FromBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, n := range nodes {
			s, err := n.String()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, []byte(s))
		}
		return out
	}

	rbac := docs("rbac-apps-in-any-namespace.yaml")
	if len(rbac) != 2 {
		t.Fatalf("rbac-apps-in-any-namespace.yaml has %d objects, want a Role and a RoleBinding", len(rbac))
	}
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	if err := errors.Join(yaml.UnmarshalStrict(rbac[0], &role), yaml.UnmarshalStrict(rbac[1], &binding)); err != nil || role.Kind != "Role" || binding.Kind != "RoleBinding" {
		t.Fatalf("rbac-apps-in-any-namespace.yaml: want a Role then a RoleBinding: %v", err)
	}
	checkRules(t, "rbac-apps-in-any-namespace.yaml Role", role.Rules)
	if role.Namespace == "" || binding.Namespace != role.Namespace {
		t.Errorf("rbac-apps-in-any-namespace.yaml: Role in %q, RoleBinding in %q: want both in the application namespace", role.Namespace, binding.Namespace)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}); binding.RoleRef != want {
		t.Errorf("rbac-apps-in-any-namespace.yaml roleRef %+v, want %+v", binding.RoleRef, want)
	}
	// The subject must name the control-plane namespace: the binding is elsewhere.
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.ServiceAccountKind || binding.Subjects[0].Name != "argocd-repo-server" ||
		binding.Subjects[0].Namespace == "" || binding.Subjects[0].Namespace == binding.Namespace {
		t.Errorf("rbac-apps-in-any-namespace.yaml subjects %+v, want ServiceAccount argocd-repo-server of the control-plane namespace", binding.Subjects)
	}

	policy := docs("refresh-only-admission-policy.yaml")
	if len(policy) != 2 {
		t.Fatalf("refresh-only-admission-policy.yaml has %d objects, want a ValidatingAdmissionPolicy and its binding", len(policy))
	}
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	var vapb admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := errors.Join(yaml.UnmarshalStrict(policy[0], &vap), yaml.UnmarshalStrict(policy[1], &vapb)); err != nil ||
		vap.Kind != "ValidatingAdmissionPolicy" || vapb.Kind != "ValidatingAdmissionPolicyBinding" {
		t.Fatalf("refresh-only-admission-policy.yaml: want a ValidatingAdmissionPolicy then its binding: %v", err)
	}
	if vapb.Spec.PolicyName != vap.Name || !slices.Equal(vapb.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("policy binding %+v does not deny with policy %s", vapb.Spec, vap.Name)
	}
	if len(vap.Spec.MatchConditions) != 1 || !strings.Contains(vap.Spec.MatchConditions[0].Expression, `":argocd-repo-server"`) {
		t.Errorf("policy match conditions %+v do not select the ServiceAccount argocd-repo-server", vap.Spec.MatchConditions)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("policy failurePolicy %v, want Fail", vap.Spec.FailurePolicy)
	}
}
