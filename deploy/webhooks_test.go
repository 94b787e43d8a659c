package deploy

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
)

// The registry webhooks' objects: the Service (in the component, webhooks-service.yaml)
// that targets the sidecar's port of that name, and, in the component webhooks/, the
// ConfigMap of the daemon's configuration file, the Secret its variables come from
// (the user's), the NetworkPolicy admitting the port.
const (
	webhookService   = "argocd-image-resolver-webhooks"
	webhookPortName  = "imgres-webhooks"
	webhookSecret    = "argocd-image-resolver-webhooks"
	webhookConfigMap = "argocd-image-resolver-config"
	webhookPolicy    = "argocd-image-resolver-webhooks"
)

// webhooksComponentObjects are what the component and webhooks/ add together.
var webhooksComponentObjects = slices.Sorted(slices.Values(append(slices.Clone(componentObjects),
	"ConfigMap "+webhookConfigMap, "NetworkPolicy "+webhookPolicy)))

// webhookAddrEnv is the variable of the daemon's setting webhookAddr.
func webhookAddrEnv(t *testing.T) string {
	t.Helper()
	for _, s := range config.Settings() {
		if s.Key == "webhookAddr" {
			return s.Env
		}
	}
	t.Fatal("config has no setting webhookAddr")
	return ""
}

// checkWebhookService checks that the webhooks Service reaches a port of the sidecar
// on the Deployment's pods (its named targetPort is the first container port of that
// name in the pod), not the metrics port, and returns that port's number.
func checkWebhookService(t *testing.T, what string, svc *corev1.Service, deploy *appsv1.Deployment) string {
	t.Helper()
	target := serviceTarget(t, svc, deploy)
	port, ok := strings.CutPrefix(target, sidecarName+":")
	_, metrics, _ := net.SplitHostPort(config.DefaultMetricsAddr)
	if !ok || port == metrics {
		t.Errorf("%s: Service %s targetPort %s reaches %q, want a port of the sidecar other than its metrics port %s",
			what, svc.Name, svc.Spec.Ports[0].TargetPort.String(), target, metrics)
	}
	if p := svc.Spec.Ports[0]; p.TargetPort.StrVal != webhookPortName || p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
		t.Errorf("%s: Service %s port %+v, want TCP to the sidecar's port %s", what, svc.Name, p, webhookPortName)
	}
	return port
}

// checkWebhooksOff checks the sidecar as shipped: the webhooks' port and Service are
// there, and the daemon's configuration (defaults, file, environment) leaves the
// listener off, as webhookAddr without a webhooks: section is an error.
func checkWebhooksOff(t *testing.T, what string, svc *corev1.Service, deploy *appsv1.Deployment, configMaps map[string]map[string]string) {
	t.Helper()
	checkWebhookService(t, what, svc, deploy)
	pod := &deploy.Spec.Template.Spec
	if cfg := daemonConfig(t, what, pod, sidecarOf(t, pod), configMaps); cfg.WebhookAddr != "" || len(cfg.Webhooks) != 0 {
		t.Errorf("%s: webhookAddr %q, webhooks %v: the listener must stay off until webhooks/ turns it on", what, cfg.WebhookAddr, cfg.Webhooks)
	}
}

// checkWebhooksOn checks the sidecar with the webhooks turned on against the daemon:
// its configuration, as the daemon builds it from the defaults, the file
// IMAGE_RESOLVER_CONFIG names (read from the ConfigMap mounted there) and the
// environment, is valid and has webhooks; webhookAddr listens on every address of the
// pod at the port the Service targets; each secret variable comes from the Secret
// argocd-image-resolver-webhooks, not optional. It returns the configuration.
func checkWebhooksOn(t *testing.T, what string, svc *corev1.Service, deploy *appsv1.Deployment, configMaps map[string]map[string]string) config.Config {
	t.Helper()
	port := checkWebhookService(t, what, svc, deploy)
	pod := &deploy.Spec.Template.Spec
	c := sidecarOf(t, pod)
	name := webhookAddrEnv(t)
	e := envOf(c, name)
	if e == nil || e.Value == "" || e.ValueFrom != nil {
		t.Fatalf("%s: sidecar env %s = %+v, want the webhooks' address", what, name, e)
	}
	host, addrPort, err := net.SplitHostPort(e.Value)
	if err != nil || addrPort != port {
		t.Errorf("%s: %s=%s: port %q, want %s, the container port the Service %s targets (%v)", what, name, e.Value, addrPort, port, svc.Name, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		t.Errorf("%s: %s=%s listens on %s only: the Service reaches the pod's IP", what, name, e.Value, host)
	}
	cfg := daemonConfig(t, what, pod, c, configMaps)
	if cfg.WebhookAddr != e.Value || len(cfg.Webhooks) == 0 {
		t.Fatalf("%s: the daemon's webhookAddr %q, webhooks %v: want %s and some", what, cfg.WebhookAddr, cfg.Webhooks, e.Value)
	}
	for _, kind := range slices.Sorted(maps.Keys(cfg.Webhooks)) {
		w := cfg.Webhooks[kind]
		switch {
		case w.SecretEnv != "":
			v := envOf(c, w.SecretEnv)
			if v == nil || v.Value != "" || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: webhooks.%s.secretEnv %s: sidecar env %+v, want it from the Secret %s", what, kind, w.SecretEnv, v, webhookSecret)
				continue
			}
			if r := v.ValueFrom.SecretKeyRef; r.Name != webhookSecret || r.Key == "" || r.Optional != nil && *r.Optional {
				t.Errorf("%s: webhooks.%s.secretEnv %s from %+v, want a key of the Secret %s, not optional", what, kind, w.SecretEnv, r, webhookSecret)
			}
		case w.SecretFile != "":
			m := mountUnder(c, w.SecretFile)
			if m == nil || volumeOf(pod, m.Name) == nil || volumeOf(pod, m.Name).Secret == nil {
				t.Errorf("%s: webhooks.%s.secretFile %s is on no Secret volume of the sidecar", what, kind, w.SecretFile)
			}
		}
	}
	return cfg
}

// daemonConfig is the configuration the daemon in container c builds, as
// config.Load does: the defaults, the file IMAGE_RESOLVER_CONFIG names (read from
// the ConfigMap of configMaps mounted there), the environment's values; then
// validated.
func daemonConfig(t *testing.T, what string, pod *corev1.PodSpec, c *corev1.Container, configMaps map[string]map[string]string) config.Config {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	cfg := config.DefaultConfig()
	if file := env[config.ConfigEnv]; file != "" {
		text, ok := configMapFile(pod, c, file, configMaps)
		if !ok {
			t.Fatalf("%s: %s=%s is no key of a ConfigMap installed and mounted in the sidecar", what, config.ConfigEnv, file)
		}
		if err := cfg.ParseFile(file, []byte(text)); err != nil {
			t.Fatalf("%s: the daemon refuses its configuration file: %v", what, err)
		}
	}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatalf("%s: the daemon refuses its environment: %v", what, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: the daemon refuses its configuration: %v", what, err)
	}
	return cfg
}

// mountUnder returns c's mount that file is under (the deepest), or nil.
func mountUnder(c *corev1.Container, file string) *corev1.VolumeMount {
	var m *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if (file == vm.MountPath || strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")) && (m == nil || len(vm.MountPath) > len(m.MountPath)) {
			m = &c.VolumeMounts[i]
		}
	}
	return m
}

// configMapFile returns the content of file in container c: the key of the
// ConfigMap volume mounted there (a subPath, or a directory of the keys or items).
func configMapFile(pod *corev1.PodSpec, c *corev1.Container, file string, configMaps map[string]map[string]string) (string, bool) {
	m := mountUnder(c, file)
	if m == nil {
		return "", false
	}
	v := volumeOf(pod, m.Name)
	if v == nil || v.ConfigMap == nil {
		return "", false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(file, m.MountPath), "/")
	if m.SubPath != "" {
		if file != m.MountPath {
			return "", false
		}
		rel = m.SubPath
	}
	key := rel
	if len(v.ConfigMap.Items) > 0 {
		key = ""
		for _, it := range v.ConfigMap.Items {
			if path.Clean(it.Path) == rel {
				key = it.Key
			}
		}
	}
	text, ok := configMaps[v.ConfigMap.Name][key]
	return text, ok && key != ""
}

// secretKeys are the keys of the Secret argocd-image-resolver-webhooks container c
// reads.
func secretKeys(c *corev1.Container) []string {
	var keys []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == webhookSecret {
			keys = append(keys, e.ValueFrom.SecretKeyRef.Key)
		}
	}
	slices.Sort(keys)
	return keys
}

func networkPolicies(t *testing.T, resMap resmap.ResMap) []networkingv1.NetworkPolicy {
	t.Helper()
	var out []networkingv1.NetworkPolicy
	for _, r := range resMap.Resources() {
		if r.GetKind() == "NetworkPolicy" {
			var np networkingv1.NetworkPolicy
			object(t, resMap, "NetworkPolicy", r.GetName(), &np)
			out = append(out, np)
		}
	}
	return out
}

// buildWebhooks builds the component and webhooks/ on install into namespace, and
// returns the result with its repo-server Deployment and webhooks Service.
func buildWebhooks(t *testing.T, files map[string][]byte, install []byte, namespace string) (resmap.ResMap, *appsv1.Deployment, *corev1.Service) {
	t.Helper()
	resMap := buildWith(t, files, install, "namespace: "+namespace+"\nresources:\n  - install.yaml\ncomponents:\n  - ../deploy\n  - ../deploy/webhooks\n")
	var deploy appsv1.Deployment
	var svc corev1.Service
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) || !object(t, resMap, "Service", webhookService, &svc) {
		t.Fatalf("no repo-server Deployment or Service %s", webhookService)
	}
	return resMap, &deploy, &svc
}

// TestWebhooksComponentOnArgoCD builds the component with webhooks/ on Argo CD's
// install manifests (every version e2e/ runs), as a user's kustomization does, and
// checks what it adds: the ConfigMap and the NetworkPolicy, nothing else; the sidecar
// of the component with only the webhooks' environment and configuration file added,
// still what Argo CD and the daemon require (the same checks as without it, Pod
// Security restricted included); a configuration the daemon accepts, its listener on
// the port the Service targets; the port admitted past Argo CD's NetworkPolicy.
func TestWebhooksComponentOnArgoCD(t *testing.T) {
	files := deployFiles(t)
	for _, version := range argoCDVersions(t) {
		manifests := argoCDManifests(t, version, "install.yaml", "namespace-install.yaml")
		for _, c := range []struct{ manifest, namespace string }{{"install.yaml", "argocd"}, {"namespace-install.yaml", "gitops"}} {
			install := manifests[c.manifest]
			t.Run(version+"/"+c.manifest+"/"+c.namespace, func(t *testing.T) {
				t.Parallel()
				resMap, deploy, svc := buildWebhooks(t, files, install, c.namespace)
				nodes := resourceIDs(t, install)
				var added []string
				for _, r := range resMap.Resources() {
					if id := r.GetKind() + " " + r.GetName(); !nodes[id] {
						added = append(added, id)
					}
				}
				slices.Sort(added)
				if !slices.Equal(added, webhooksComponentObjects) {
					t.Errorf("the component with webhooks/ adds %q, want %q", added, webhooksComponentObjects)
				}

				pod := &deploy.Spec.Template.Spec
				configMaps := configMapsOf(t, resMap)
				checkSidecarPod(t, pod, configMaps, "argocd-repo-server")
				checkRestricted(t, "webhooks/", repoServerOf(t, install), deploy, sidecarName)
				checkDefaultContainer(t, "webhooks/", &deploy.Spec.Template, "argocd-repo-server")
				if want, got := repoServerOf(t, install).Spec.Template.Spec.Containers[0], pod.Containers[0]; !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("webhooks/ changed Argo CD's container %s:\n%+v\n---- want ----\n%+v", want.Name, got, want)
				}
				checkWebhooksOn(t, "webhooks/", svc, deploy, configMaps)

				// Only added to the component's sidecar: its settings, mounts, ports stay.
				var plain appsv1.Deployment
				if !object(t, buildOn(t, files, install, c.namespace), "Deployment", "argocd-repo-server", &plain) {
					t.Fatal("the component did not build")
				}
				base := sidecarOf(t, &plain.Spec.Template.Spec)
				got := sidecarOf(t, pod).DeepCopy()
				got.Env = slices.DeleteFunc(got.Env, func(e corev1.EnvVar) bool { return envOf(base, e.Name) == nil })
				got.VolumeMounts = slices.DeleteFunc(got.VolumeMounts, func(m corev1.VolumeMount) bool { return mountAt(base, m.MountPath) == nil })
				if !equality.Semantic.DeepEqual(got, base) {
					gb, _ := yaml.Marshal(got)
					wb, _ := yaml.Marshal(base)
					t.Errorf("webhooks/ changes the sidecar beyond adding to it:\n%s\n---- the component's ----\n%s", gb, wb)
				}
				for _, v := range plain.Spec.Template.Spec.Volumes {
					if w := volumeOf(pod, v.Name); w == nil || !equality.Semantic.DeepEqual(*w, v) {
						t.Errorf("webhooks/ changes volume %s: %+v, want %+v", v.Name, w, v)
					}
				}

				// The port, past Argo CD's own NetworkPolicy on the repo-server pods.
				port, _ := strconv.Atoi(checkWebhookService(t, "webhooks/", svc, deploy))
				podLabels := deploy.Spec.Template.Labels
				if !admitsPort(t, networkPolicies(t, resMap), podLabels, int32(port)) {
					t.Errorf("no NetworkPolicy admits port %d of the repo-server pods %v: no ingress controller reaches the webhooks", port, podLabels)
				}
				if admitsPort(t, networkPolicies(t, buildOn(t, files, install, c.namespace)), podLabels, int32(port)) {
					t.Logf("Argo CD %s's own NetworkPolicies admit port %d already", version, port)
				}
			})
		}
	}
}

// resourceIDs are the "Kind name" of a YAML stream's objects.
func resourceIDs(t *testing.T, b []byte) map[string]bool {
	t.Helper()
	nodes, err := kio.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range nodes {
		out[n.GetKind()+" "+n.GetName()] = true
	}
	return out
}

// ingressPrefix checks deploy/webhooks/ingress.yaml against the webhooks Service svc:
// an example (in no kustomization's resources), an Ingress (strictly decoded) with
// no default backend, TLS for each host, and one path per host, the prefix
// /webhooks/ of svc's port. It returns that prefix.
func ingressPrefix(t *testing.T, files map[string][]byte, svc *corev1.Service) string {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(files["webhooks/kustomization.yaml"], &k); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(k.Resources, "ingress.yaml") {
		t.Errorf("webhooks/kustomization.yaml resources %q include ingress.yaml, an example to copy and adjust", k.Resources)
	}
	var ing networkingv1.Ingress
	if err := yaml.UnmarshalStrict(files["webhooks/ingress.yaml"], &ing); err != nil || ing.Kind != "Ingress" {
		t.Fatalf("webhooks/ingress.yaml is not an Ingress: %v", err)
	}
	if ing.Spec.DefaultBackend != nil {
		t.Errorf("webhooks/ingress.yaml has a default backend %+v: it would expose more than /webhooks/", ing.Spec.DefaultBackend)
	}
	tls := map[string]bool{}
	for _, x := range ing.Spec.TLS {
		if x.SecretName == "" {
			t.Errorf("webhooks/ingress.yaml tls %+v names no certificate Secret", x)
		}
		for _, h := range x.Hosts {
			tls[h] = true
		}
	}
	if len(ing.Spec.Rules) == 0 {
		t.Fatal("webhooks/ingress.yaml has no rules")
	}
	var prefix string
	for _, r := range ing.Spec.Rules {
		if r.Host == "" || !tls[r.Host] {
			t.Errorf("webhooks/ingress.yaml host %q is not served over TLS (tls hosts %v)", r.Host, slices.Sorted(maps.Keys(tls)))
		}
		if r.HTTP == nil || len(r.HTTP.Paths) != 1 {
			t.Fatalf("webhooks/ingress.yaml host %s: paths %+v, want one, /webhooks/", r.Host, r.HTTP)
		}
		p := r.HTTP.Paths[0]
		b := p.Backend.Service
		if p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix || strings.TrimSuffix(p.Path, "/") != "/webhooks" {
			t.Errorf("webhooks/ingress.yaml path %q (%v), want the prefix /webhooks/ only", p.Path, p.PathType)
		}
		if b == nil || b.Name != svc.Name || !(b.Port.Name != "" && b.Port.Name == svc.Spec.Ports[0].Name || b.Port.Number != 0 && b.Port.Number == svc.Spec.Ports[0].Port) {
			t.Errorf("webhooks/ingress.yaml backend %+v, want Service %s port %s", b, svc.Name, svc.Spec.Ports[0].Name)
		}
		prefix = strings.TrimSuffix(p.Path, "/") + "/"
	}
	return prefix
}

// TestWebhooksServe runs the daemon with the configuration the component with
// webhooks/ gives the sidecar, secrets in the variables the Secret fills, and sends
// each kind configured what its sender sends, at the path the example Ingress
// exposes: without the secret it is refused (401), with it (a bearer token, or
// GitHub's and Gitea's HMAC signature of the body) it is past authentication; kinds
// not configured are not served (404). It also checks README.md's and webhooks/'s
// command creating the Secret against the keys the sidecar reads.
func TestWebhooksServe(t *testing.T) {
	files := deployFiles(t)
	install := argoCDManifests(t, argoCDVersions(t)[0], "install.yaml")["install.yaml"]
	resMap, deploy, svc := buildWebhooks(t, files, install, "argocd")
	cfg := checkWebhooksOn(t, "webhooks/", svc, deploy, configMapsOf(t, resMap))
	prefix := ingressPrefix(t, files, svc)

	// kubectl create secret generic argocd-image-resolver-webhooks --from-literal=KEY=...
	want := secretKeys(sidecarOf(t, &deploy.Spec.Template.Spec))
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"README.md": string(readme), "webhooks/kustomization.yaml": string(files["webhooks/kustomization.yaml"])} {
		if got := secretCommandKeys(text); !slices.Equal(got, want) {
			t.Errorf("%s: kubectl create secret generic %s with keys %q, the sidecar reads %q", where, webhookSecret, got, want)
		}
	}

	secrets := map[string]string{}
	for kind, w := range cfg.Webhooks {
		if w.SecretEnv == "" {
			t.Fatalf("webhooks.%s: a secretFile; this test fills variables only", kind)
		}
		b := make([]byte, 24)
		rand.Read(b)
		secrets[kind] = hex.EncodeToString(b)
		t.Setenv(w.SecretEnv, secrets[kind])
	}
	cfg.Socket = filepath.Join(t.TempDir(), "image-resolver", "daemon.sock")
	cfg.MetricsAddr = ""
	cfg.WebhookAddr = "127.0.0.1:0"
	d, err := daemon.New(cfg, daemon.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("the daemon does not start with the sidecar's configuration: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	select {
	case <-d.Ready():
	case err := <-done:
		done <- err
		t.Fatalf("daemon: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the daemon is not ready after a minute")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(kind string, h http.Header) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+d.WebhookAddr()+prefix+kind, bytes.NewReader(webhookBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s%s: %v", prefix, kind, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, kind := range config.WebhookKinds {
		secret, ok := secrets[kind]
		if !ok {
			if code := post(kind, http.Header{"Authorization": {"Bearer 0123456789abcdef0123"}}); code != http.StatusNotFound {
				t.Errorf("POST %s%s, a kind not configured: %d, want 404", prefix, kind, code)
			}
			continue
		}
		without, with := post(kind, http.Header{}), post(kind, webhookAuth(kind, secret))
		t.Logf("POST %s%s: %d without the secret, %d with it", prefix, kind, without, with)
		if without != http.StatusUnauthorized {
			t.Errorf("POST %s%s without the secret: %d, want 401", prefix, kind, without)
		}
		if with == http.StatusUnauthorized || with == http.StatusForbidden || with == http.StatusNotFound {
			t.Errorf("POST %s%s with the secret of %s: %d: the daemon does not take the secret the sidecar's environment gives it",
				prefix, kind, cfg.Webhooks[kind].SecretEnv, with)
		}
	}
}

// webhookBody is what the test sends: JSON, not any sender's event.
var webhookBody = []byte(`{"events":[]}`)

// webhookAuth is how kind's sender proves it holds secret: GitHub and Gitea sign
// the body (X-Hub-Signature-256), the others send it as a bearer token.
func webhookAuth(kind, secret string) http.Header {
	if kind == "github" || kind == "gitea" {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(webhookBody)
		return http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac.Sum(nil))}}
	}
	return http.Header{"Authorization": {"Bearer " + secret}}
}

var fromLiteral = regexp.MustCompile(`--from-literal=([A-Za-z0-9._-]+)=`)

// secretCommandKeys returns the keys of the first `kubectl ... create secret generic
// argocd-image-resolver-webhooks` of text (its continuation lines joined, comment
// marks dropped), sorted.
func secretCommandKeys(text string) []string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "create secret generic "+webhookSecret) {
			continue
		}
		var keys []string
		for ; i < len(lines); i++ {
			l := strings.TrimLeft(strings.TrimSpace(lines[i]), "# ")
			for _, m := range fromLiteral.FindAllStringSubmatch(l, -1) {
				keys = append(keys, m[1])
			}
			if !strings.HasSuffix(l, `\`) {
				break
			}
		}
		slices.Sort(keys)
		return keys
	}
	return nil
}

// TestWebhooksREADME builds README.md's kustomization with the webhooks (Argo CD,
// the component, webhooks/, a copy of the example Ingress) and checks that the
// pieces reach each other: the Ingress's backend is the webhooks Service of the same
// namespace, which targets the sidecar's listener.
func TestWebhooksREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	b := string(readme)
	const marker = "```yaml\n# kustomization.yaml: Argo CD with the registry webhooks\n"
	start := strings.Index(b, marker)
	if start < 0 {
		t.Fatal("README.md has no kustomization example for the webhooks")
	}
	block := b[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	install := regexp.MustCompile(`https://raw\.githubusercontent\.com/argoproj/argo-cd/[^/]+/manifests/install\.yaml`)
	const remote = "https://github.com/argocd-image-resolver/argocd-image-resolver//deploy"
	if !install.MatchString(block) || !strings.Contains(block, remote+"?ref=") || !strings.Contains(block, remote+"/webhooks?ref=") || !strings.Contains(block, "- ingress.yaml") {
		t.Fatalf("README.md's example does not name Argo CD's install.yaml, the component, webhooks/ and ingress.yaml:\n%s", block)
	}
	block = install.ReplaceAllString(block, "install.yaml")
	block = regexp.MustCompile(regexp.QuoteMeta(remote)+`(/webhooks)?\?ref=\S+`).ReplaceAllString(block, "../deploy$1")
	files := deployFiles(t)
	resMap := buildApp(t, files, map[string][]byte{
		"kustomization.yaml": []byte(block),
		"install.yaml":       argoCDManifests(t, argoCDVersions(t)[0], "install.yaml")["install.yaml"],
		"ingress.yaml":       files["webhooks/ingress.yaml"],
	})
	var deploy appsv1.Deployment
	var svc corev1.Service
	var ing networkingv1.Ingress
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) || !object(t, resMap, "Service", webhookService, &svc) ||
		!object(t, resMap, "Ingress", webhookService, &ing) {
		t.Fatal("README.md's example builds no repo-server Deployment, webhooks Service or Ingress")
	}
	checkWebhooksOn(t, "README.md's example", &svc, &deploy, configMapsOf(t, resMap))
	if ing.Namespace != svc.Namespace || ing.Namespace != deploy.Namespace {
		t.Errorf("README.md's example: Ingress in %q, Service in %q, repo-server in %q: want one namespace", ing.Namespace, svc.Namespace, deploy.Namespace)
	}
	ingressPrefix(t, files, &svc)
}
