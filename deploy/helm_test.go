package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// chartValues are the argo-cd chart's keys deploy/helm/values.yaml sets, typed as the
// chart's templates use them (github.com/argoproj/argo-helm, charts/argo-cd/templates,
// read at these commits; the chart itself cannot be fetched here, only Go modules can):
//
//   - repoServer.extraContainers: appended to the repo-server pod's containers, after
//     tpl (argocd-repo-server/deployment.yaml, 011824fa);
//   - repoServer.volumes: first of the pod's volumes, before the chart's own
//     (plugins, var-files, tmp, ...) (same file);
//   - repoServer.automountServiceAccountToken: the pod's (same file);
//   - repoServer.podAnnotations: added to the pod template's annotations, after the
//     chart's checksums, merged over global.podAnnotations (same file);
//   - repoServer.rbac: the rules of the Role the chart creates for repo-server and
//     binds to its ServiceAccount when repoServer.serviceAccount.create (the default)
//     (argocd-repo-server/role.yaml 0dc73fdc, rolebinding.yaml 4f3a9e60);
//   - configs.cmp.create, configs.cmp.plugins: ConfigMap argocd-cmp-cm with, per
//     plugin NAME, key NAME.yaml holding a ConfigManagementPlugin named NAME whose
//     spec is the value (argocd-configs/argocd-cmp-cm.yaml, 30b338a0);
//   - extraObjects: objects added as they are (templates/extra-manifests.yaml).
//
// Decoding is strict: a misspelt key of a container, volume or rule is an error.
type chartValues struct {
	RepoServer struct {
		AutomountServiceAccountToken *bool               `json:"automountServiceAccountToken"`
		PodAnnotations               map[string]string   `json:"podAnnotations"`
		Rbac                         []rbacv1.PolicyRule `json:"rbac"`
		ExtraContainers              []corev1.Container  `json:"extraContainers"`
		Volumes                      []corev1.Volume     `json:"volumes"`
	} `json:"repoServer"`
	Configs struct {
		Cmp struct {
			Create  bool                      `json:"create"`
			Plugins map[string]map[string]any `json:"plugins"`
		} `json:"cmp"`
	} `json:"configs"`
	ExtraObjects []map[string]any `json:"extraObjects"`
}

// chartPod is the repo-server pod the argo-cd chart renders with values, built as its
// deployment template does, on Argo CD's own repo-server pod of the same Argo CD
// version (the chart's pod has the same init container copying argocd-cmp-server
// into var-files, the same plugins, var-files and tmp volumes); the chart names the
// container repo-server and its ports repo-server and metrics.
func chartPod(t *testing.T, install []byte, v chartValues) appsv1.Deployment {
	t.Helper()
	var deploy appsv1.Deployment
	for _, doc := range strings.Split(string(install), "\n---\n") {
		if strings.Contains(doc, "\nkind: Deployment") && strings.Contains(doc, "\n  name: argocd-repo-server\n") {
			if err := yaml.Unmarshal([]byte(doc), &deploy); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod := &deploy.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Argo CD's repo-server pod has %d containers", len(pod.Containers))
	}
	repo := &pod.Containers[0]
	repo.Name = "repo-server"
	for i, p := range repo.Ports {
		switch p.ContainerPort {
		case 8081:
			repo.Ports[i].Name = "repo-server"
		case 8084:
			repo.Ports[i].Name = "metrics"
		}
	}
	pod.Containers = append(pod.Containers, v.RepoServer.ExtraContainers...)
	pod.Volumes = append(slices.Clone(v.RepoServer.Volumes), pod.Volumes...)
	pod.AutomountServiceAccountToken = v.RepoServer.AutomountServiceAccountToken
	for k, val := range v.RepoServer.PodAnnotations {
		if deploy.Spec.Template.Annotations == nil {
			deploy.Spec.Template.Annotations = map[string]string{}
		}
		deploy.Spec.Template.Annotations[k] = val
	}
	return deploy
}

// TestHelmValues checks deploy/helm/values.yaml: its structure against the chart's
// keys (strictly typed), the repo-server pod the chart makes of it against what Argo
// CD and the daemon require (the same checks as the Kustomize component's), and that
// it installs the component's sidecar, volumes, plugin configuration, RBAC, metrics
// and webhooks Services: the Kustomize component is the one source, the values follow
// it. The webhooks, off as in the component, are checked turned on in
// TestHelmValuesWebhooks.
func TestHelmValues(t *testing.T) {
	b, err := os.ReadFile("helm/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("helm/values.yaml does not have the chart's structure: %v", err)
	}
	if len(v.RepoServer.ExtraContainers) != 1 {
		t.Fatalf("repoServer.extraContainers has %d containers, want the sidecar", len(v.RepoServer.ExtraContainers))
	}
	// The chart passes extraContainers through tpl: template text would be evaluated.
	cb, _ := yaml.Marshal(v.RepoServer.ExtraContainers)
	if strings.Contains(string(cb), "{{") {
		t.Errorf("repoServer.extraContainers holds {{, which the chart's tpl would evaluate")
	}
	if a := v.RepoServer.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("repoServer.automountServiceAccountToken %v, want false (the chart's default, true, gives repo-server's container a token)", a)
	}
	checkRules(t, "repoServer.rbac", v.RepoServer.Rbac)

	version := argoCDVersions(t)[0]
	install := argoCDManifests(t, version, "install.yaml")["install.yaml"]
	deploy := chartPod(t, install, v)
	pod := &deploy.Spec.Template.Spec

	// configs.cmp, as the chart writes it.
	if !v.Configs.Cmp.Create {
		t.Error("configs.cmp.create is false: the chart would not create argocd-cmp-cm")
	}
	cmp := map[string]string{}
	for name, spec := range v.Configs.Cmp.Plugins {
		doc, err := yaml.Marshal(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "ConfigManagementPlugin",
			"metadata": map[string]any{"name": name}, "spec": spec})
		if err != nil {
			t.Fatal(err)
		}
		cmp[name+".yaml"] = string(doc)
	}
	checkSidecarPod(t, pod, map[string]map[string]string{"argocd-cmp-cm": cmp}, "repo-server")
	checkDefaultContainer(t, "helm/values.yaml", &deploy.Spec.Template, "repo-server")
	plain := chartPod(t, install, chartValues{})
	checkRestricted(t, "helm/values.yaml", &plain, &deploy, sidecarName)

	// The token: only the sidecar's.
	sidecar := sidecarOf(t, pod)
	token := mountAt(sidecar, tokenDir)
	if token == nil || !token.ReadOnly {
		t.Fatalf("the sidecar mounts %+v at %s, want its read-only token", token, tokenDir)
	}
	checkTokenVolume(t, pod.Volumes, token.Name)

	// extraObjects: the metrics and webhooks Services.
	if len(v.ExtraObjects) != 2 {
		t.Fatalf("extraObjects has %d objects, want the metrics and webhooks Services", len(v.ExtraObjects))
	}
	var svc, hooks corev1.Service
	extraObject(t, v, "Service", "argocd-image-resolver-metrics", &svc)
	extraObject(t, v, "Service", webhookService, &hooks)
	checkMetricsService(t, &svc, &deploy)
	checkWebhooksOff(t, "helm/values.yaml", &hooks, &deploy, map[string]map[string]string{"argocd-cmp-cm": cmp})

	// The same as the component: build it on the same install and compare.
	resMap := buildOn(t, deployFiles(t), install, "argocd")
	var built appsv1.Deployment
	var builtSvc, builtHooks corev1.Service
	var role rbacv1.Role
	if !object(t, resMap, "Deployment", "argocd-repo-server", &built) || !object(t, resMap, "Service", "argocd-image-resolver-metrics", &builtSvc) ||
		!object(t, resMap, "Service", webhookService, &builtHooks) || !object(t, resMap, "Role", "argocd-image-resolver", &role) {
		t.Fatal("the component did not build")
	}
	want := sidecarOf(t, &built.Spec.Template.Spec).DeepCopy()
	got := sidecar.DeepCopy()
	// Only where the plugin configuration comes from differs: argocd-cmp-cm's key.
	for _, c := range []*corev1.Container{want, got} {
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == pluginConfig })
	}
	if !equality.Semantic.DeepEqual(got, want) {
		gb, _ := yaml.Marshal(got)
		wb, _ := yaml.Marshal(want)
		t.Errorf("repoServer.extraContainers differs from the component's sidecar (repo-server-sidecar.yaml):\n%s\n---- want ----\n%s", gb, wb)
	}
	pluginVolume := mountAt(sidecar, pluginConfig).Name
	for _, vol := range v.RepoServer.Volumes {
		if vol.Name == pluginVolume {
			continue
		}
		if bv := volumeOf(&built.Spec.Template.Spec, vol.Name); bv == nil || !equality.Semantic.DeepEqual(*bv, vol) {
			t.Errorf("repoServer.volumes %s differs from the component's: %+v, want %+v", vol.Name, vol, bv)
		}
	}
	if !equality.Semantic.DeepEqual(role.Rules, v.RepoServer.Rbac) {
		t.Errorf("repoServer.rbac %+v, the component's Role %+v", v.RepoServer.Rbac, role.Rules)
	}
	for _, s := range []struct{ values, built *corev1.Service }{{&svc, &builtSvc}, {&hooks, &builtHooks}} {
		s.built.Namespace = ""
		if !equality.Semantic.DeepEqual(*s.values, *s.built) {
			t.Errorf("extraObjects' Service %+v differs from the component's %+v", *s.values, *s.built)
		}
	}
}

// extraObject decodes, strictly, the object of kind and name of extraObjects into out.
func extraObject(t *testing.T, v chartValues, kind, name string, out any) {
	t.Helper()
	for _, o := range v.ExtraObjects {
		md, _ := o["metadata"].(map[string]any)
		if o["kind"] != kind || md["name"] != name {
			continue
		}
		b, _ := yaml.Marshal(o)
		if err := yaml.UnmarshalStrict(b, out); err != nil {
			t.Fatalf("extraObjects' %s %s: %v", kind, name, err)
		}
		return
	}
	t.Fatalf("extraObjects has no %s %s", kind, name)
}

// webhooksMarker starts, in helm/values.yaml, a block of commented lines to
// uncomment to turn the registry webhooks on.
const webhooksMarker = "# [webhooks]"

// uncommentWebhooks turns helm/values.yaml's webhooks on as its comment tells a
// user to: after each line webhooksMarker starts, the comment lines of the same
// indentation, up to the next line that is not one, lose their "# ". It returns
// the text and the number of blocks.
func uncommentWebhooks(text string) (string, int) {
	lines := strings.Split(text, "\n")
	blocks := 0
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(trimmed, webhooksMarker) {
			continue
		}
		blocks++
		indent := lines[i][:len(lines[i])-len(trimmed)]
		for i++; i < len(lines); i++ {
			rest, ok := strings.CutPrefix(lines[i], indent+"# ")
			if !ok {
				break
			}
			lines[i] = indent + rest
		}
		i--
	}
	return strings.Join(lines, "\n"), blocks
}

// TestHelmValuesWebhooks turns the webhooks on in helm/values.yaml as its comment
// says (uncommentWebhooks) and checks the result as TestHelmValues checks the file,
// against the component with webhooks/: the same sidecar, volumes and ConfigMap,
// and what the daemon requires of them (checkWebhooksOn).
func TestHelmValuesWebhooks(t *testing.T) {
	b, err := os.ReadFile("helm/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text, blocks := uncommentWebhooks(string(b))
	// env, volumeMounts, volumes, extraObjects
	if blocks != 4 {
		t.Fatalf("helm/values.yaml has %d blocks after %q, want 4: the sidecar's env and volumeMounts, repoServer.volumes, extraObjects", blocks, webhooksMarker)
	}
	var v chartValues
	if err := yaml.UnmarshalStrict([]byte(text), &v); err != nil {
		t.Fatalf("helm/values.yaml with the webhooks uncommented does not have the chart's structure: %v\n%s", err, text)
	}
	install := argoCDManifests(t, argoCDVersions(t)[0], "install.yaml")["install.yaml"]
	deploy := chartPod(t, install, v)
	pod := &deploy.Spec.Template.Spec
	if len(v.RepoServer.ExtraContainers) != 1 {
		t.Fatalf("repoServer.extraContainers has %d containers, want the sidecar", len(v.RepoServer.ExtraContainers))
	}
	if len(v.ExtraObjects) != 3 {
		t.Fatalf("extraObjects has %d objects, want the metrics and webhooks Services and the ConfigMap %s", len(v.ExtraObjects), webhookConfigMap)
	}
	var hooks corev1.Service
	var cm corev1.ConfigMap
	extraObject(t, v, "Service", webhookService, &hooks)
	extraObject(t, v, "ConfigMap", webhookConfigMap, &cm)
	cmp := map[string]string{}
	for name, spec := range v.Configs.Cmp.Plugins {
		doc, _ := yaml.Marshal(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "ConfigManagementPlugin",
			"metadata": map[string]any{"name": name}, "spec": spec})
		cmp[name+".yaml"] = string(doc)
	}
	configMaps := map[string]map[string]string{"argocd-cmp-cm": cmp, cm.Name: cm.Data}
	checkSidecarPod(t, pod, configMaps, "repo-server")
	plain := chartPod(t, install, chartValues{})
	checkRestricted(t, "helm/values.yaml with webhooks", &plain, &deploy, sidecarName)
	checkWebhooksOn(t, "helm/values.yaml with webhooks", &hooks, &deploy, configMaps)

	// The same as the component with webhooks/.
	resMap, built, _ := buildWebhooks(t, deployFiles(t), install, "argocd")
	want := sidecarOf(t, &built.Spec.Template.Spec).DeepCopy()
	got := sidecarOf(t, pod).DeepCopy()
	// In any order: Kustomize puts a patch's entries first, the values follow the
	// component's order; no variable refers to another ($(NAME)).
	for _, c := range []*corev1.Container{want, got} {
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == pluginConfig })
		slices.SortFunc(c.Env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(c.VolumeMounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.MountPath, b.MountPath) })
		for _, e := range c.Env {
			if strings.Contains(e.Value, "$(") {
				t.Errorf("%s: env %s refers to another variable: its order matters", c.Name, e.Name)
			}
		}
	}
	if !equality.Semantic.DeepEqual(got, want) {
		gb, _ := yaml.Marshal(got)
		wb, _ := yaml.Marshal(want)
		t.Errorf("repoServer.extraContainers with webhooks differs from the sidecar of the component with webhooks/:\n%s\n---- want ----\n%s", gb, wb)
	}
	pluginVolume := mountAt(sidecarOf(t, pod), pluginConfig).Name
	for _, vol := range v.RepoServer.Volumes {
		if vol.Name == pluginVolume {
			continue
		}
		if bv := volumeOf(&built.Spec.Template.Spec, vol.Name); bv == nil || !equality.Semantic.DeepEqual(*bv, vol) {
			t.Errorf("repoServer.volumes %s with webhooks differs from the component's: %+v, want %+v", vol.Name, vol, bv)
		}
	}
	var builtCM corev1.ConfigMap
	if !object(t, resMap, "ConfigMap", webhookConfigMap, &builtCM) {
		t.Fatalf("webhooks/ has no ConfigMap %s", webhookConfigMap)
	}
	builtCM.Namespace = ""
	if !equality.Semantic.DeepEqual(cm, builtCM) {
		t.Errorf("extraObjects' ConfigMap %+v differs from webhooks/'s %+v", cm, builtCM)
	}
}
