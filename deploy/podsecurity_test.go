package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// restrictedViolations evaluates a pod against the restricted Pod Security Standard
// with the checks kube-apiserver's PodSecurity admission runs (its latest version):
// runAsNonRoot, a non-root runAsUser, no privilege escalation, capabilities dropped
// (ALL; only NET_BIND_SERVICE added), seccompProfile RuntimeDefault or Localhost, only
// configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected
// and secret volumes, no host namespaces, ports or paths, no privileged container.
// It returns what the admission would refuse, as it words it, or "".
func restrictedViolations(t *testing.T, meta *metav1.ObjectMeta, pod *corev1.PodSpec) string {
	t.Helper()
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	results := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, meta, pod))
	if results.Allowed {
		return ""
	}
	return results.ForbiddenDetail()
}

// oursOnly is pod with only the containers named in ours (init containers too) and
// the volumes they mount; the pod-level fields (securityContext, host namespaces)
// stay as the pod has them, since they apply to our containers too.
func oursOnly(pod *corev1.PodSpec, ours []string) *corev1.PodSpec {
	out := pod.DeepCopy()
	notOurs := func(c corev1.Container) bool { return !slices.Contains(ours, c.Name) }
	out.InitContainers = slices.DeleteFunc(out.InitContainers, notOurs)
	out.Containers = slices.DeleteFunc(out.Containers, notOurs)
	mounted := map[string]bool{}
	for _, c := range append(slices.Clone(out.InitContainers), out.Containers...) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
		}
	}
	out.Volumes = slices.DeleteFunc(out.Volumes, func(v corev1.Volume) bool { return !mounted[v.Name] })
	return out
}

// checkRestricted checks a variant's repo-server pod (after) against the restricted
// standard: the containers named ours pass on their own, and a pod of Argo CD's that
// passed before the variant was added (before) passes with it. A pod of Argo CD's
// that did not pass is logged with why: Argo CD's own containers are not ours.
func checkRestricted(t *testing.T, what string, before, after *appsv1.Deployment, ours ...string) {
	t.Helper()
	pod := &after.Spec.Template.Spec
	var found []string
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if slices.Contains(ours, c.Name) {
			found = append(found, c.Name)
		}
	}
	if len(found) != len(ours) {
		t.Fatalf("%s: containers %q of ours, found %q", what, ours, found)
	}
	if v := restrictedViolations(t, &after.Spec.Template.ObjectMeta, oursOnly(pod, ours)); v != "" {
		t.Errorf("%s: our containers %q break the restricted Pod Security Standard: %s", what, ours, v)
	}
	was := restrictedViolations(t, &before.Spec.Template.ObjectMeta, &before.Spec.Template.Spec)
	now := restrictedViolations(t, &after.Spec.Template.ObjectMeta, pod)
	switch {
	case was == "" && now != "":
		t.Errorf("%s: Argo CD's repo-server pod passes the restricted standard, with ours it does not: %s", what, now)
	case was != "":
		t.Logf("%s: Argo CD's own repo-server pod does not pass the restricted standard (%s); with ours: %s", what, was, now)
	}
}

// repoServerOf returns the argocd-repo-server Deployment of Argo CD's install manifest.
func repoServerOf(t *testing.T, install []byte) *appsv1.Deployment {
	t.Helper()
	for _, doc := range strings.Split(string(install), "\n---\n") {
		if strings.Contains(doc, "\nkind: Deployment") && strings.Contains(doc, "\n  name: argocd-repo-server\n") {
			var d appsv1.Deployment
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}
	}
	t.Fatal("no Deployment argocd-repo-server in Argo CD's install manifest")
	return nil
}

// TestRestrictedCheckFails: the check refuses what the restricted standard refuses,
// each rule on its own, on the component's sidecar (so that the checks of the
// variants above cannot pass for want of a rule).
func TestRestrictedCheckFails(t *testing.T) {
	install := argoCDManifests(t, argoCDVersions(t)[0], "install.yaml")["install.yaml"]
	resMap := buildOn(t, deployFiles(t), install, "argocd")
	var deploy appsv1.Deployment
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) {
		t.Fatal("no repo-server Deployment")
	}
	if v := restrictedViolations(t, &deploy.Spec.Template.ObjectMeta, oursOnly(&deploy.Spec.Template.Spec, []string{sidecarName})); v != "" {
		t.Fatalf("the shipped sidecar fails: %s", v)
	}
	yes, no := true, false
	for _, tc := range []struct {
		name   string
		breaks func(*corev1.PodSpec, *corev1.Container)
		want   string
	}{
		{"no seccomp profile", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.SeccompProfile = nil }, "seccompProfile"},
		{"unconfined seccomp", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "seccompProfile"},
		{"privilege escalation", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.AllowPrivilegeEscalation = &yes }, "allowPrivilegeEscalation"},
		{"may run as root", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.RunAsNonRoot = &no }, "runAsNonRoot"},
		{"root user", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.RunAsUser = new(int64) }, "runAsUser=0"},
		{"capabilities kept", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.Capabilities = nil }, "capabilities"},
		{"a capability added", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "NET_ADMIN"},
		{"hostPath volume", func(p *corev1.PodSpec, c *corev1.Container) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "host", MountPath: "/host"})
		}, "hostPath"},
		{"host network", func(p *corev1.PodSpec, _ *corev1.Container) { p.HostNetwork = true }, "host namespaces"},
		{"host PID", func(p *corev1.PodSpec, _ *corev1.Container) { p.HostPID = true }, "host namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := oursOnly(&deploy.Spec.Template.Spec, []string{sidecarName})
			tc.breaks(pod, sidecarOf(t, pod))
			if v := restrictedViolations(t, &deploy.Spec.Template.ObjectMeta, pod); !strings.Contains(v, tc.want) {
				t.Errorf("violations %q, want one naming %q", v, tc.want)
			}
		})
	}
}
