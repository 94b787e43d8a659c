package migrate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// An ext: credential script is kept in the registries file, but it cannot run in
// the sidecar's image (no shell, no tools): not carried over, said for the
// registries.conf entry and for a pull secret alike, with the native keychain of
// the registry's cloud proposed when its host names one, else what runs there.
func TestExtCredentials(t *testing.T) {
	tests := []struct {
		prefix string
		want   []string // in the finding, after what every ext: finding says
	}{
		{"123456789012.dkr.ecr.eu-west-1.amazonaws.com", []string{"write credentials: ecr instead", "IRSA or EKS Pod Identity"}},
		{"123456789012.dkr.ecr.eu-west-1.amazonaws.com/team", []string{"write credentials: ecr instead"}},
		{"europe-west1-docker.pkg.dev/project/repo", []string{"write credentials: google instead", "GKE Workload Identity"}},
		{"gcr.io/project", []string{"write credentials: google instead"}},
		{"eu.gcr.io", []string{"write credentials: google instead"}},
		{"myregistry.azurecr.io", []string{"write credentials: acr instead", "AKS Workload Identity"}},
		{"public.ecr.aws/team", []string{"mount a static executable into the sidecar", "secret:, pullsecret:, dockerconfig: or env:"}},
		{"registry.example.com/team", []string{"mount a static executable into the sidecar"}},
		{"notecr.dkr.ecr.example.com", []string{"mount a static executable into the sidecar"}},
	}
	every := []string{`credentials "ext:/app/auth/login.sh": kept, but it cannot run as it is`, "no shell", "argocd-image-updater's pod"}
	for _, tt := range tests {
		conf := fmt.Sprintf("registries:\n- name: cloud\n  prefix: %s\n  credentials: ext:/app/auth/login.sh\n", tt.prefix)
		res, err := Migrate([]Input{{Name: "registries.conf", Data: []byte(conf)}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := findings(res, "registries", Lost); !hasFinding(got, append([]string{"(cloud) credentials"}, append(every, tt.want...)...)...) {
			t.Errorf("registries.conf %s: no finding with %q among %q", tt.prefix, tt.want, got)
		}
		regs, err := resolve.ParseRegistries("migrated", res.Registries)
		if err != nil || len(regs) != 1 || regs[0].Credentials != "ext:/app/auth/login.sh" {
			t.Errorf("registries.conf %s: the script is not kept: %+v, %v", tt.prefix, regs, err)
		}

		app := fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: a
  annotations:
    argocd-image-updater.argoproj.io/image-list: web=%s/web
    argocd-image-updater.argoproj.io/web.pull-secret: ext:/app/auth/login.sh
spec: {source: {repoURL: r, path: a}}
`, tt.prefix)
		res, err = Migrate([]Input{{Name: "app", Data: []byte(app)}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := findings(res, "Application a", Lost); !hasFinding(got, append([]string{"web.pull-secret: pull-secret credentials"}, append(every, tt.want...)...)...) {
			t.Errorf("pull-secret %s: no finding with %q among %q", tt.prefix, tt.want, got)
		}
	}

	// Another credential source says nothing of scripts.
	for _, src := range []string{"pullsecret:argocd/regcred", "secret:argocd/s#creds", "env:CREDS"} {
		if got := extCredentials(src, "123456789012.dkr.ecr.eu-west-1.amazonaws.com"); got != "" {
			t.Errorf("%s: %q", src, got)
		}
	}
}

// The comment that replaces an ImageUpdater says to delete it, with the command:
// while it is in the cluster, argocd-image-updater goes on acting on the apps.
func TestImageUpdaterDeleteAdvice(t *testing.T) {
	tests := []struct {
		name, metadata string
		want           string
	}{
		{"namespaced", "{name: iu, namespace: argocd}", "(kubectl delete imageupdaters.argocd-image-updater.argoproj.io iu -n argocd)"},
		{"no namespace", "{name: iu}", "(kubectl delete imageupdaters.argocd-image-updater.argoproj.io iu)"},
	}
	for _, tt := range tests {
		in := `apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: ` + tt.metadata + `
spec:
  namespace: argocd
  applicationRefs:
    - namePattern: app
      images: [{alias: web, imageName: ghcr.io/o/web}]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: app, namespace: argocd}
spec: {source: {repoURL: r, path: app}}
`
		res, err := Migrate([]Input{{Name: "in", Data: []byte(in)}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(res.Manifests), "\n")
		for _, w := range []string{"# argocd-image-resolver migrate: ImageUpdater ", "replaced by the plugin parameters", "delete the ImageUpdater", tt.want, "or argocd-image-updater keeps acting on them"} {
			if !strings.Contains(first, w) {
				t.Errorf("%s: comment %q\nwant it to say %q", tt.name, first, w)
			}
		}
	}
}
