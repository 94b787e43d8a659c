package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"
)

// legacyArgoCD is the Argo CD the legacy variant is built on: 2.7, the last minor
// with argocd-cm plugins (2.8 removed them), at v2.7.14, the newest 2.7 the Go module
// proxy serves here. The checksum database has no entry for it, so this one download
// goes without it (GONOSUMDB); only its manifests are read.
const legacyArgoCD = "v2.7.14"

// legacyPlugin is an entry of argocd-cm's configManagementPlugins, as Argo CD v2.7
// decodes it (pkg/apis/application/v1alpha1/types.go, ConfigManagementPlugin and
// Command); decoding strictly catches a key it would ignore.
type legacyPlugin struct {
	Name     string         `json:"name"`
	Init     *legacyCommand `json:"init,omitempty"`
	Generate legacyCommand  `json:"generate"`
	LockRepo bool           `json:"lockRepo,omitempty"`
}

type legacyCommand struct {
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
}

// TestLegacyArgoCDCM builds deploy/legacy-argocd-cm on Argo CD v2.7's install
// manifests, into the usual namespace and another one, and checks what Argo CD's
// repo-server needs to run the plugin itself: the plugin in argocd-cm under the name
// Applications use, both binaries in repo-server's /usr/local/bin from a volume the
// init container fills with `install`, and the daemon beside it: the same socket, the
// same /tmp (where repo-server checks repositories out and the daemon renders them),
// Argo CD's user, the token its alone, the component's RBAC and metrics Service.
func TestLegacyArgoCDCM(t *testing.T) {
	install := argoCDManifestsEnv(t, legacyArgoCD, []string{"GONOSUMDB=github.com/argoproj/argo-cd"}, "install.yaml")["install.yaml"]
	files := deployFiles(t)
	nodes, err := kio.FromBytes(install)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, n := range nodes {
		before[n.GetKind()+" "+n.GetName()] = true
	}
	for _, namespace := range []string{"argocd", "gitops"} {
		t.Run(namespace, func(t *testing.T) {
			resMap := buildWith(t, files, install, "namespace: "+namespace+"\nresources:\n  - install.yaml\ncomponents:\n  - ../deploy/legacy-argocd-cm\n")
			var added []string
			for _, r := range resMap.Resources() {
				if id := r.GetKind() + " " + r.GetName(); !before[id] {
					added = append(added, id)
				}
			}
			slices.Sort(added)
			if want := []string{"Role argocd-image-resolver", "RoleBinding argocd-image-resolver", "Service argocd-image-resolver-metrics"}; !slices.Equal(added, want) {
				t.Errorf("the legacy variant adds %q, want %q", added, want)
			}

			// argocd-cm: the plugin, named as Applications name the sidecar's.
			var cm corev1.ConfigMap
			if !object(t, resMap, "ConfigMap", "argocd-cm", &cm) {
				t.Fatal("no ConfigMap argocd-cm")
			}
			var plugins []legacyPlugin
			if err := yaml.UnmarshalStrict([]byte(cm.Data["configManagementPlugins"]), &plugins); err != nil {
				t.Fatalf("argocd-cm configManagementPlugins is not what Argo CD v2.7 reads: %v\n%s", err, cm.Data["configManagementPlugins"])
			}
			if len(plugins) != 1 || plugins[0].Name != "image-resolver-v1" || !slices.Equal(plugins[0].Generate.Command, []string{"argocd-image-resolver-generate"}) ||
				len(plugins[0].Generate.Args) != 0 || plugins[0].Init != nil {
				t.Errorf("configManagementPlugins %+v, want image-resolver-v1 generating with argocd-image-resolver-generate", plugins)
			}

			var deploy appsv1.Deployment
			if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) {
				t.Fatal("no Deployment argocd-repo-server")
			}
			pod := &deploy.Spec.Template.Spec
			var repo *corev1.Container
			for i := range pod.Containers {
				if pod.Containers[i].Name == "argocd-repo-server" {
					repo = &pod.Containers[i]
				}
			}
			if repo == nil {
				t.Fatal("no argocd-repo-server container")
			}
			daemonC := sidecarOf(t, pod)

			// The binaries: in /usr/local/bin of repo-server, from the volume the init
			// container installs them into.
			var binVolume string
			for _, name := range []string{"argocd-image-resolver", "argocd-image-resolver-generate"} {
				m := mountAt(repo, "/usr/local/bin/"+name)
				if m == nil || m.SubPath != name {
					t.Errorf("repo-server mounts %+v at /usr/local/bin/%s, want the file %s of the binaries' volume", m, name, name)
					continue
				}
				if binVolume != "" && m.Name != binVolume {
					t.Errorf("the binaries come from volumes %s and %s", binVolume, m.Name)
				}
				binVolume = m.Name
			}
			if v := volumeOf(pod, binVolume); v == nil || v.EmptyDir == nil {
				t.Errorf("the binaries' volume %q is not an emptyDir of the pod", binVolume)
			}
			installed := false
			for _, ic := range pod.InitContainers {
				for _, m := range ic.VolumeMounts {
					if m.Name == binVolume && slices.Equal(append(slices.Clone(ic.Command), ic.Args...), []string{"argocd-image-resolver", "install", m.MountPath}) {
						installed = true
						if ic.SecurityContext == nil || ic.SecurityContext.RunAsUser == nil || *ic.SecurityContext.RunAsUser != argocdUser {
							t.Errorf("init container %s does not run as %d", ic.Name, argocdUser)
						}
					}
				}
			}
			if !installed {
				t.Errorf("no init container runs `argocd-image-resolver install` into volume %s", binVolume)
			}

			// The daemon: sidecar without a CMP server (it keeps the daemon running), its
			// socket where generate looks, repo-server's /tmp.
			if cmd := strings.Join(append(slices.Clone(daemonC.Command), daemonC.Args...), " "); cmd != "argocd-image-resolver sidecar" {
				t.Errorf("daemon command %q, want argocd-image-resolver sidecar", cmd)
			}
			checkDaemonContainer(t, pod, daemonC)
			checkRestricted(t, "the legacy variant", repoServerOf(t, install), &deploy, "install-image-resolver", sidecarName)
			checkDefaultContainer(t, "the legacy variant", &deploy.Spec.Template, "argocd-repo-server")
			for _, name := range []string{socketEnv, "IMAGE_RESOLVER_DEFAULT_PLATFORMS", "IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE"} {
				if r, d := envOf(repo, name), envOf(daemonC, name); r == nil || d == nil || r.Value != d.Value || !equalSource(r.ValueFrom, d.ValueFrom) {
					t.Errorf("env %s: repo-server %+v, daemon %+v: want the same (a render without the daemon must answer as it does)", name, r, d)
				}
			}
			if e := envOf(repo, "IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE %+v, want the pod's namespace", e)
			}
			if r, d := mountAt(repo, "/tmp"), mountAt(daemonC, "/tmp"); r == nil || d == nil || r.Name != d.Name {
				t.Errorf("/tmp: repo-server %+v, daemon %+v: want the same volume (the checkouts the daemon renders, the socket)", r, d)
			}

			// The token: the daemon's alone.
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("the pod's automountServiceAccountToken is %s, want false", boolString(pod.AutomountServiceAccountToken))
			}
			token := mountAt(daemonC, tokenDir)
			if token == nil || !token.ReadOnly {
				t.Fatalf("the daemon mounts %+v at %s, want its read-only token", token, tokenDir)
			}
			for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
				for _, m := range c.VolumeMounts {
					if c.Name != daemonC.Name && (m.Name == token.Name || strings.HasPrefix(m.MountPath, tokenDir)) {
						t.Errorf("container %s mounts the token volume", c.Name)
					}
				}
			}
			checkTokenVolume(t, pod.Volumes, token.Name)

			// RBAC and the metrics Service, as the component's.
			var role rbacv1.Role
			var binding rbacv1.RoleBinding
			if !object(t, resMap, "Role", "argocd-image-resolver", &role) || !object(t, resMap, "RoleBinding", "argocd-image-resolver", &binding) {
				t.Fatal("no Role or RoleBinding argocd-image-resolver")
			}
			checkRules(t, "Role", role.Rules)
			if len(binding.Subjects) != 1 || binding.Subjects[0].Name != pod.ServiceAccountName || binding.RoleRef.Name != role.Name ||
				binding.Namespace != namespace || role.Namespace != namespace {
				t.Errorf("RoleBinding %+v does not give Role %s/%s to the repo-server's ServiceAccount %s", binding, role.Namespace, role.Name, pod.ServiceAccountName)
			}
			var svc corev1.Service
			if !object(t, resMap, "Service", "argocd-image-resolver-metrics", &svc) {
				t.Fatal("no metrics Service")
			}
			checkMetricsService(t, &svc, &deploy)
		})
	}

	// The copies are the component's files, comments aside.
	for _, name := range []string{"rbac.yaml", "metrics-service.yaml"} {
		got, want := objectsOf(t, files["legacy-argocd-cm/"+name]), objectsOf(t, files[name])
		if got != want {
			t.Errorf("legacy-argocd-cm/%s differs from %s; copy it again:\n%s\n---- want ----\n%s", name, name, got, want)
		}
	}
}

func equalSource(a, b *corev1.EnvVarSource) bool {
	ab, _ := yaml.Marshal(a)
	bb, _ := yaml.Marshal(b)
	return string(ab) == string(bb)
}

// objectsOf returns the objects of a YAML stream without comments, normalised.
func objectsOf(t *testing.T, b []byte) string {
	t.Helper()
	nodes, err := kio.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes {
		m, err := n.Map()
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(y))
	}
	return strings.Join(out, "---\n")
}
