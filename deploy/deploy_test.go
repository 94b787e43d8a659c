// Package deploy holds the Kustomize component that installs argocd-image-resolver;
// this test builds it the way a user's kustomization would.
package deploy

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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
