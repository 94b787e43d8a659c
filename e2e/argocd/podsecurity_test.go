package argocde2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// restrictedNS enforces the restricted Pod Security Standard (PodSecurity admission is
// built into kube-apiserver).
const restrictedNS = "ps-restricted"

// testPodSecurityRestricted: the repo-server pod of each deploy variant, built by the
// kustomize this Argo CD version ships over its own install.yaml, is admitted by the
// lab's kube-apiserver into a namespace enforcing `restricted` (a server-side dry run of
// the pod template as a Pod: what the ReplicaSet controller would create), with no
// warning; Argo CD's own repo-server alone is admitted too; and the check can fail: the
// sidecar without its seccompProfile is refused.
func testPodSecurityRestricted(t *testing.T, lab *Lab) {
	if _, err := lab.must("", "kubectl", "create", "namespace", restrictedNS); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	if _, err := lab.must("", "kubectl", "label", "--overwrite", "namespace", restrictedNS,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		t.Fatal(err)
	}
	// The pod's ServiceAccount must exist (ServiceAccount admission); nothing else it
	// names is looked up in a dry run.
	if _, err := lab.must("", "kubectl", "-n", restrictedNS, "create", "serviceaccount", "argocd-repo-server"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(lab.Version, "v"), ".")
	argo, err := moduleDir("github.com/argoproj/argo-cd/v" + major + "@" + lab.Version)
	if err != nil {
		t.Fatal(err)
	}
	install, err := os.ReadFile(filepath.Join(argo, "manifests", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct{ name, component string }{
		{"argo-cd-alone", ""},
		{"component", "deploy"},
		{"legacy-argocd-cm", "deploy/legacy-argocd-cm"},
	} {
		t.Run(v.name, func(t *testing.T) {
			pod := repoServerPod(t, lab, install, v.name, v.component)
			r := admit(t, lab, pod)
			if r.Code != 0 || strings.Contains(r.Stderr, "Warning") {
				t.Errorf("the repo-server pod of %s is not admitted under restricted as it is:\n%s", v.name, r)
			}
		})
	}
	t.Run("sidecar-without-seccomp-refused", func(t *testing.T) {
		pod := repoServerPod(t, lab, install, "no-seccomp", "deploy")
		spec := pod["spec"].(map[string]any)
		found := false
		for _, c := range spec["containers"].([]any) {
			c := c.(map[string]any)
			if strings.Contains(c["name"].(string), "image-resolver") {
				if sc, ok := c["securityContext"].(map[string]any); ok {
					delete(sc, "seccompProfile")
					found = true
				}
			}
		}
		if !found {
			t.Fatal("no image-resolver container with a securityContext in the component's repo-server")
		}
		delete(spec, "securityContext") // nor the pod's, which containers inherit
		r := admit(t, lab, pod)
		if r.Code == 0 || !strings.Contains(r.Stderr, "seccompProfile") {
			t.Errorf("the sidecar without seccompProfile was not refused naming it:\n%s", r)
		}
	})
}

// repoServerPod builds install.yaml with the component (a directory of the checkout; ""
// for none) by `kustomize build` of this Argo CD version's kustomize, and returns the
// argocd-repo-server Deployment's pod template as a Pod repo-server-NAME in restrictedNS.
func repoServerPod(t *testing.T, lab *Lab, install []byte, name, component string) map[string]any {
	t.Helper()
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	kust := "resources:\n  - install.yaml\n"
	if component != "" {
		if err := copyDir(filepath.Join(lab.Paths.Root, component), filepath.Join(dir, component)); err != nil {
			t.Fatal(err)
		}
		kust += "components:\n  - ../" + component + "\n"
	}
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"install.yaml": install, "kustomization.yaml": []byte(kust)} {
		if err := os.WriteFile(filepath.Join(app, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := lab.must("", "kustomize", "build", app)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range splitYAML(out) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		meta, _ := o["metadata"].(map[string]any)
		if o["kind"] != "Deployment" || meta["name"] != "argocd-repo-server" {
			continue
		}
		tmpl := o["spec"].(map[string]any)["template"].(map[string]any)
		tmeta, _ := tmpl["metadata"].(map[string]any)
		if tmeta == nil {
			tmeta = map[string]any{}
		}
		tmeta["name"] = "repo-server-" + name
		tmeta["namespace"] = restrictedNS
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": tmeta, "spec": tmpl["spec"]}
	}
	t.Fatalf("no Deployment argocd-repo-server in the build of %q", component)
	return nil
}

// admit asks kube-apiserver to create pod as a server-side dry run (admission runs,
// nothing is stored).
func admit(t *testing.T, lab *Lab, pod map[string]any) Result {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(lab.Dir, "tmp", fmt.Sprintf("pod-%s.json", pod["metadata"].(map[string]any)["name"]))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return lab.Run("", "kubectl", "create", "--dry-run=server", "-f", f)
}
