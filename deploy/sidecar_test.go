package deploy

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
)

// What Argo CD's CMP server requires of a plugin sidecar (DESIGN.md section 10; Argo
// CD's config-management-plugins docs): its user, the shared socket directory, the
// plugin configuration's path, the var-files volume its binary comes from.
const (
	sidecarName   = "image-resolver"
	argocdUser    = 999
	pluginsDir    = "/home/argocd/cmp-server/plugins"
	pluginConfig  = "/home/argocd/cmp-server/config/plugin.yaml"
	varFilesDir   = "/var/run/argocd"
	cmpServerPath = "/var/run/argocd/argocd-cmp-server"
	socketEnv     = api.SocketEnv
)

// sidecarOf returns the image-resolver container of pod.
func sidecarOf(t *testing.T, pod *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range pod.Containers {
		if pod.Containers[i].Name == sidecarName {
			return &pod.Containers[i]
		}
	}
	t.Fatalf("no %s container among %d", sidecarName, len(pod.Containers))
	return nil
}

func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volumeOf(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func envOf(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkSidecarPod checks the repo-server pod with the sidecar against what Argo CD and
// the daemon require. configMaps holds the ConfigMaps of the installation by name, to
// read the plugin configuration the sidecar mounts; repoServer names Argo CD's own
// container (argocd-repo-server in the install manifests, repo-server in the chart).
func checkSidecarPod(t *testing.T, pod *corev1.PodSpec, configMaps map[string]map[string]string, repoServer string) {
	t.Helper()
	c := sidecarOf(t, pod)
	var repo *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == repoServer {
			repo = &pod.Containers[i]
		}
	}
	if repo == nil {
		t.Fatalf("no %s container: the sidecar needs Argo CD's repo-server beside it", repoServer)
	}

	checkDaemonContainer(t, pod, c)

	// The command: our entrypoint runs Argo CD's cmp-server from var-files.
	if cmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " "); cmd != "argocd-image-resolver sidecar -- "+cmpServerPath {
		t.Errorf("sidecar command %q, want the daemon and Argo CD's cmp-server", cmd)
	}
	// var-files: the volume an init container of Argo CD's fills with argocd-cmp-server.
	vf := mountAt(c, varFilesDir)
	if vf == nil || vf.Name != "var-files" {
		t.Errorf("sidecar mounts %+v at %s, want the var-files volume", vf, varFilesDir)
	} else {
		filled := false
		for _, ic := range pod.InitContainers {
			if m := mountAt(&ic, varFilesDir); m != nil && m.Name == vf.Name &&
				strings.Contains(strings.Join(append(slices.Clone(ic.Command), ic.Args...), " "), cmpServerPath) {
				filled = true
			}
		}
		if !filled {
			t.Errorf("no init container copies argocd-cmp-server into volume %s: the sidecar's command would not exist", vf.Name)
		}
	}
	// The socket directory: the plugins volume, shared with repo-server at the same path.
	pm := mountAt(c, pluginsDir)
	rm := mountAt(repo, pluginsDir)
	if pm == nil || rm == nil || pm.Name != rm.Name {
		t.Errorf("plugins directory %s: sidecar mounts %+v, repo-server %+v: want the same volume, where the socket is", pluginsDir, pm, rm)
	}
	// The plugin configuration: a file, from a ConfigMap key holding ../plugin.yaml.
	cm := mountAt(c, pluginConfig)
	if cm == nil || cm.SubPath == "" {
		t.Errorf("sidecar mounts %+v at %s, want one key of a ConfigMap (subPath)", cm, pluginConfig)
	} else if v := volumeOf(pod, cm.Name); v == nil || v.ConfigMap == nil {
		t.Errorf("volume %s of the plugin configuration is not a ConfigMap", cm.Name)
	} else {
		data, ok := configMaps[v.ConfigMap.Name]
		if !ok {
			t.Errorf("ConfigMap %s of the plugin configuration is not installed", v.ConfigMap.Name)
		}
		checkPluginConfig(t, "ConfigMap "+v.ConfigMap.Name+" key "+cm.SubPath, data[cm.SubPath])
	}
	// Its own /tmp, an emptyDir (the root filesystem is read-only), not repo-server's.
	tm := mountAt(c, "/tmp")
	if tm == nil || volumeOf(pod, tm.Name) == nil || volumeOf(pod, tm.Name).EmptyDir == nil {
		t.Errorf("sidecar /tmp %+v: want an emptyDir of its own", tm)
	} else if m := mountAt(repo, "/tmp"); m != nil && m.Name == tm.Name {
		t.Errorf("sidecar and repo-server share /tmp (volume %s)", tm.Name)
	} else {
		checkScratch(t, pod, c, volumeOf(pod, tm.Name))
	}
}

// defaultContainer is the annotation kubectl reads for the container logs and exec
// use when none is named (-c).
const defaultContainer = "kubectl.kubernetes.io/default-container"

// checkDefaultContainer checks that the pod template makes Argo CD's own container
// (repoServer) the one kubectl logs and exec land in, not ours (which has no shell),
// and that the pod lists repo-server first, then ours.
func checkDefaultContainer(t *testing.T, what string, tmpl *corev1.PodTemplateSpec, repoServer string) {
	t.Helper()
	if got := tmpl.Annotations[defaultContainer]; got != repoServer {
		t.Errorf("%s: pod annotation %s = %q, want %q", what, defaultContainer, got, repoServer)
	}
	var names []string
	for _, c := range tmpl.Spec.Containers {
		names = append(names, c.Name)
	}
	if want := []string{repoServer, sidecarName}; !slices.Equal(names, want) {
		t.Errorf("%s: containers %q, want %q in this order", what, names, want)
	}
}

// watchListAllowance is the part of the sidecar's /tmp for the daemon's socket and
// the refresh loop's watch list (two copies while it is replaced): maxTrackedApps
// (10,000) sources of a few KiB each at most.
const watchListAllowance = 64 << 20

// scratchBound is what the sidecar c may write to its /tmp at most, from the settings
// its environment gives (the defaults otherwise): each render's manifests that
// argocd-image-resolver-generate spools (renderWorkers at once, each at most
// pipeline.MaxOutput), one pin write's repository (at most twice
// git.maxRepositoryBytes, briefly, while a pack is checked and indexed), the socket
// and the watch list.
func scratchBound(t *testing.T, c *corev1.Container) int64 {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	cfg := config.DefaultConfig()
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatalf("%s environment: %v", c.Name, err)
	}
	repo := cfg.Git.MaxRepositoryBytes
	if repo <= 0 {
		repo = pin.DefaultMaxRepositoryBytes
	}
	return int64(cfg.RenderWorkers)*pipeline.MaxOutput + 2*repo + watchListAllowance
}

// checkScratch checks the sidecar's /tmp volume: an emptyDir whose sizeLimit is
// exactly scratchBound (larger leaves the node's disk unguarded, smaller gets the
// whole pod evicted under load), and the CMP server's unpacked repositories, which
// no setting of ours bounds, on another volume (ARGOCD_CMP_WORKDIR).
func checkScratch(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, tmp *corev1.Volume) {
	t.Helper()
	want := scratchBound(t, c)
	if got := tmp.EmptyDir.SizeLimit; got == nil || got.Value() != want {
		t.Errorf("sidecar /tmp (volume %s) sizeLimit %v, want %s = renderWorkers × %s of manifests spooled + 2 × git.maxRepositoryBytes + %s for the socket and watch list",
			tmp.Name, got, config.FormatSize(want), config.FormatSize(pipeline.MaxOutput), config.FormatSize(watchListAllowance))
	}
	e := envOf(c, "ARGOCD_CMP_WORKDIR")
	if e == nil || e.Value == "" || strings.HasPrefix(e.Value+"/", "/tmp/") {
		t.Errorf("ARGOCD_CMP_WORKDIR %+v: argocd-cmp-server would unpack repositories into the size-limited /tmp", e)
		return
	}
	m := mountAt(c, e.Value)
	if m == nil || m.Name == tmp.Name || volumeOf(pod, m.Name) == nil || volumeOf(pod, m.Name).EmptyDir == nil {
		t.Errorf("ARGOCD_CMP_WORKDIR %s is mounted from %+v, want an emptyDir of its own", e.Value, m)
	} else if lim := volumeOf(pod, m.Name).EmptyDir.SizeLimit; lim != nil {
		t.Errorf("volume %s of the CMP server's repositories has sizeLimit %s: repositories are as large as Argo CD's, and past it the pod is evicted", m.Name, lim)
	}
}

// checkDaemonContainer checks the container c of pod that runs the daemon (the
// sidecar, or the legacy variant's daemon): Argo CD's user, a hardened security
// context, a socket the daemon accepts, probes, resources, unique port names.
func checkDaemonContainer(t *testing.T, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	// The user: 999, as Argo CD's image runs repo-server, so both read and write the
	// shared plugins directory and the daemon's socket (mode 0600).
	var user *int64
	if c.SecurityContext != nil {
		user = c.SecurityContext.RunAsUser
	}
	if user == nil && pod.SecurityContext != nil {
		user = pod.SecurityContext.RunAsUser
	}
	if user == nil || *user != argocdUser {
		t.Errorf("%s runAsUser %v, want %d (Argo CD's user)", c.Name, user, argocdUser)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s securityContext %+v: want runAsNonRoot, no privilege escalation, a read-only root", c.Name, sc)
	}
	checkSocketPath(t, c, pod)

	// No probe: the container's readiness is the pod's, so a probe of the daemon would
	// take repo-server, native Helm and Kustomize apps with it, out of its Service
	// whenever the daemon is down, and a liveness probe would restart the CMP server;
	// sidecar keeps the daemon running instead (cmd/argocd-image-resolver, supervise.go).
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p != nil {
			t.Errorf("%s has a %s probe %+v: a daemon down would make the repo-server pod unready or restart the container", c.Name, what, p)
		}
	}
	if cmd := append(slices.Clone(c.Command), c.Args...); len(cmd) < 2 || cmd[0] != "argocd-image-resolver" || cmd[1] != "sidecar" {
		t.Errorf("%s runs %q, want argocd-image-resolver sidecar, which keeps the daemon running", c.Name, cmd)
	}

	// Resources: requests, a memory limit the runtime knows of.
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() || lim.Memory().Cmp(*req.Memory()) < 0 {
		t.Errorf("sidecar resources %+v: want cpu and memory requests, and a memory limit above the request", c.Resources)
	}
	if e := envOf(c, "GOMEMLIMIT"); e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
		e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" || e.ValueFrom.ResourceFieldRef.ContainerName != c.Name {
		t.Errorf("GOMEMLIMIT %+v: want the sidecar's own limits.memory", e)
	}
	checkMemoryFits(t, c)

	// Port names are the pod's: a Service's named targetPort takes the first container
	// port of that name, so a duplicate would send the metrics Service elsewhere.
	seen := map[string]string{}
	for _, ct := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, p := range ct.Ports {
			if p.Name == "" {
				continue
			}
			if other, dup := seen[p.Name]; dup {
				t.Errorf("port name %s is used by %s and %s", p.Name, other, ct.Name)
			}
			seen[p.Name] = ct.Name
		}
	}
}

// containerPort returns the number of port p of container c as a string ("" if none).
func containerPort(c *corev1.Container, p intstr.IntOrString) string {
	if p.Type == intstr.Int {
		return strconv.Itoa(int(p.IntVal))
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return ""
}

// checkPluginConfig checks that text is the plugin configuration of ../plugin.yaml:
// the same ConfigManagementPlugin (name, version, commands, parameters).
func checkPluginConfig(t *testing.T, where, text string) {
	t.Helper()
	want, err := os.ReadFile("../plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got, exp map[string]any
	if err := yaml.Unmarshal([]byte(text), &got); err != nil || got == nil {
		t.Errorf("%s: not a plugin configuration: %v\n%s", where, err, text)
		return
	}
	if err := yaml.Unmarshal(want, &exp); err != nil {
		t.Fatal(err)
	}
	gb, _ := yaml.Marshal(got)
	wb, _ := yaml.Marshal(exp)
	if string(gb) != string(wb) {
		t.Errorf("%s differs from plugin.yaml:\n%s\n---- want ----\n%s", where, gb, wb)
	}
}

// checkSocketPath checks that the daemon can listen on the socket the sidecar's
// environment names, in the volume mounted there as Kubernetes makes an emptyDir
// (mode 0777, no sticky bit): the daemon refuses a socket in a directory others can
// write to, and a socket in a mount's root would stop the sidecar at start.
func checkSocketPath(t *testing.T, c *corev1.Container, pod *corev1.PodSpec) {
	t.Helper()
	e := envOf(c, socketEnv)
	socket := api.DefaultSocket
	if e != nil {
		socket = e.Value
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(socket, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || volumeOf(pod, mount.Name) == nil || volumeOf(pod, mount.Name).EmptyDir == nil {
		t.Errorf("socket %s is on no emptyDir of the sidecar (the root filesystem is read-only)", socket)
		return
	}
	root, err := os.MkdirTemp("", "cir")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o777); err != nil { // as the kubelet makes an emptyDir
		t.Fatal(err)
	}
	cfg := config.DefaultConfig()
	cfg.Socket = filepath.Join(root, strings.TrimPrefix(socket, mount.MountPath))
	cfg.MetricsAddr = ""
	d, err := daemon.New(cfg, daemon.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Listen(); err != nil {
		t.Errorf("%s=%s in the emptyDir %s: the daemon refuses it, the sidecar would not start: %v", socketEnv, socket, mount.Name, err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Errorf("daemon: %v", err)
	}
}

// checkMetricsService checks that the Service's port reaches the sidecar's metrics
// port on the Deployment's pods: its selector matches them and its named targetPort
// is the sidecar's (the first container port of that name in the pod).
func checkMetricsService(t *testing.T, svc *corev1.Service, deploy *appsv1.Deployment) {
	t.Helper()
	_, port, _ := net.SplitHostPort(config.DefaultMetricsAddr)
	if target := serviceTarget(t, svc, deploy); target != sidecarName+":"+port {
		t.Errorf("Service %s targetPort %s reaches %q, want the sidecar's %s", svc.Name, svc.Spec.Ports[0].TargetPort.String(), target, port)
	}
}

// serviceTarget checks that the Service selects the Deployment's pods and has one
// port, with a named targetPort, and returns what that port reaches in the pod,
// "container:port" (the first container port of that name, as Kubernetes takes it),
// or "" if none.
func serviceTarget(t *testing.T, svc *corev1.Service, deploy *appsv1.Deployment) string {
	t.Helper()
	pod := &deploy.Spec.Template.Spec
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(deploy.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selector %v does not select the repo-server pods %v", svc.Name, svc.Spec.Selector, deploy.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service %s ports %+v, want one", svc.Name, svc.Spec.Ports)
	}
	tp := svc.Spec.Ports[0].TargetPort
	if tp.Type != intstr.String {
		t.Errorf("Service %s targetPort %s is a number: name the sidecar's port", svc.Name, tp.String())
		return ""
	}
	for _, c := range pod.Containers {
		if p := containerPort(&c, tp); p != "" {
			return c.Name + ":" + p
		}
	}
	return ""
}

// admitsPort reports whether the NetworkPolicies let traffic from some pod of some
// namespace reach port of the pods with podLabels: true when no policy of
// podLabels' namespace selects them for ingress, or one admits that port.
func admitsPort(t *testing.T, policies []networkingv1.NetworkPolicy, podLabels map[string]string, port int32) bool {
	t.Helper()
	selected := false
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(podLabels)) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		selected = true
		for _, rule := range np.Spec.Ingress {
			portOK := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.Type == intstr.Int && p.Port.IntVal == port && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
					portOK = true
				}
			}
			if portOK {
				return true
			}
		}
	}
	return !selected
}

// TestMonitoringOnArgoCD builds the component and deploy/monitoring on Argo CD's
// install manifests (newest version e2e/ runs), as a user's kustomization does, and
// checks that the pieces reach each other: the ServiceMonitor selects the metrics
// Service and names its port, Prometheus may reach port 8090 of the repo-server pods
// past Argo CD's own NetworkPolicy, the dashboard's ConfigMap holds dashboard.json for
// Grafana's sidecar.
func TestMonitoringOnArgoCD(t *testing.T) {
	version := argoCDVersions(t)[0]
	install := argoCDManifests(t, version, "install.yaml")["install.yaml"]
	files := deployFiles(t)
	_, port, _ := net.SplitHostPort(config.DefaultMetricsAddr)
	metricsPort, _ := strconv.Atoi(port)

	resMap := buildWith(t, files, install, "namespace: argocd\nresources:\n  - install.yaml\n  - ../deploy/monitoring\ncomponents:\n  - ../deploy\n")
	var deploy appsv1.Deployment
	var svc corev1.Service
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) || !object(t, resMap, "Service", "argocd-image-resolver-metrics", &svc) {
		t.Fatal("no repo-server Deployment or metrics Service")
	}
	var sm struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector *struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if !object(t, resMap, "ServiceMonitor", "argocd-image-resolver", &sm) {
		t.Fatal("no ServiceMonitor argocd-image-resolver")
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(svc.Labels)) || sm.Metadata.Namespace != svc.Namespace {
		t.Errorf("ServiceMonitor %s/%s selector %v does not select Service %s/%s %v", sm.Metadata.Namespace, sm.Metadata.Name, sm.Spec.Selector, svc.Namespace, svc.Name, svc.Labels)
	}
	// It must select that Service only: any other would be scraped as the daemon.
	for _, r := range resMap.Resources() {
		if r.GetKind() == "Service" && r.GetName() != svc.Name && sel.Matches(labels.Set(r.GetLabels())) {
			t.Errorf("the ServiceMonitor also selects Service %s", r.GetName())
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port %s path /metrics", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	if !object(t, resMap, "PrometheusRule", "argocd-image-resolver", &struct{}{}) {
		t.Error("no PrometheusRule argocd-image-resolver")
	}

	policies := func(resMap resmap.ResMap) []networkingv1.NetworkPolicy {
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
	podLabels := deploy.Spec.Template.Labels
	if !admitsPort(t, policies(resMap), podLabels, int32(metricsPort)) {
		t.Errorf("no NetworkPolicy admits port %d of the repo-server pods %v: Prometheus cannot scrape the daemon", metricsPort, podLabels)
	}
	without := buildWith(t, files, install, "namespace: argocd\nresources:\n  - install.yaml\ncomponents:\n  - ../deploy\n")
	if admitsPort(t, policies(without), podLabels, int32(metricsPort)) {
		t.Logf("Argo CD %s's own NetworkPolicies admit port %d already; networkpolicy.yaml is not needed with it", version, metricsPort)
	}

	var dash corev1.ConfigMap
	if !object(t, resMap, "ConfigMap", "argocd-image-resolver-dashboard", &dash) {
		t.Fatal("no ConfigMap argocd-image-resolver-dashboard")
	}
	if dash.Labels["grafana_dashboard"] != "1" || dash.Data["argocd-image-resolver.json"] != string(files["monitoring/dashboard.json"]) {
		t.Errorf("dashboard ConfigMap labels %v, keys %v: want grafana_dashboard=1 and dashboard.json as argocd-image-resolver.json", dash.Labels, slices.Sorted(mapKeys(dash.Data)))
	}
}

// TestMonitoringObjectsDecode decodes the ServiceMonitor and the PrometheusRule
// strictly into the Prometheus Operator's own types (monitoring.coreos.com/v1), so a
// misspelt or misplaced field, which the operator would drop, fails here.
func TestMonitoringObjectsDecode(t *testing.T) {
	for file, into := range map[string]any{
		"monitoring/servicemonitor.yaml": &monitoringv1.ServiceMonitor{},
		"monitoring/prometheusrule.yaml": &monitoringv1.PrometheusRule{},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Errorf("%s is not what the Prometheus Operator reads: %v", file, err)
		}
	}
}

// TestREADMEExamples builds the kustomization of README.md's settings example (a
// strategic-merge patch of the sidecar's environment) on Argo CD: it changes that
// setting and keeps the sidecar whole.
func TestREADMEExamples(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "```yaml\npatches:\n")
	if start < 0 {
		t.Fatal("README.md has no patches example")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	install := argoCDManifests(t, argoCDVersions(t)[0], "namespace-install.yaml")["namespace-install.yaml"]
	resMap := buildWith(t, deployFiles(t), install, "namespace: argocd\nresources:\n  - install.yaml\ncomponents:\n  - ../deploy\n"+block)
	var deploy appsv1.Deployment
	if !object(t, resMap, "Deployment", "argocd-repo-server", &deploy) {
		t.Fatal("no repo-server Deployment")
	}
	pod := &deploy.Spec.Template.Spec
	if e := envOf(sidecarOf(t, pod), "IMAGE_RESOLVER_DEFAULT_PLATFORMS"); e == nil || e.Value != "linux/arm64" {
		t.Errorf("after README.md's patch IMAGE_RESOLVER_DEFAULT_PLATFORMS = %+v, want linux/arm64", e)
	}
	checkSidecarPod(t, pod, configMapsOf(t, resMap), "argocd-repo-server")
}

// The label kube-prometheus-stack's Prometheus selects ServiceMonitors and rules by
// when its values set no selectors (serviceMonitorSelectorNilUsesHelmValues,
// ruleSelectorNilUsesHelmValues: release: <its release name>), for a release named
// kube-prometheus-stack.
const releaseLabel, releaseName = "release", "kube-prometheus-stack"

// TestMonitoringReleaseLabel: the ServiceMonitor and the PrometheusRule carry the
// label kube-prometheus-stack selects them by, and README.md's example patch for a
// release of another name (built as a user's kustomization) changes it on both and
// on nothing else.
func TestMonitoringReleaseLabel(t *testing.T) {
	files := deployFiles(t)
	monitored := []string{"ServiceMonitor", "PrometheusRule"}
	labelsOf := func(resMap resmap.ResMap) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, r := range resMap.Resources() {
			out[r.GetKind()+" "+r.GetName()] = r.GetLabels()
		}
		return out
	}
	shipped := labelsOf(buildWith(t, files, nil, "resources:\n  - ../deploy/monitoring\n"))
	for _, kind := range monitored {
		if got := shipped[kind+" argocd-image-resolver"][releaseLabel]; got != releaseName {
			t.Errorf("%s argocd-image-resolver label %s = %q, want %q (kube-prometheus-stack's default selector)", kind, releaseLabel, got, releaseName)
		}
	}

	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "```yaml\n# kustomization.yaml: deploy/monitoring for a kube-prometheus-stack release named prometheus\n"
	text := string(b)
	start := strings.Index(text, marker)
	if start < 0 {
		t.Fatal("README.md has no example of the release label's patch")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	const remote = "https://github.com/argocd-image-resolver/argocd-image-resolver//deploy/monitoring?ref=v0.1.0"
	if !strings.Contains(block, remote) {
		t.Fatalf("README.md's example does not take deploy/monitoring from %s:\n%s", remote, block)
	}
	patched := labelsOf(buildWith(t, files, nil, strings.Replace(block, remote, "../deploy/monitoring", 1)))
	if len(patched) != len(shipped) {
		t.Fatalf("with README.md's patch: objects %v, want %v", slices.Sorted(mapKeys(patched)), slices.Sorted(mapKeys(shipped)))
	}
	for id, want := range shipped {
		want = maps.Clone(want)
		kind, _, _ := strings.Cut(id, " ")
		if slices.Contains(monitored, kind) {
			want[releaseLabel] = "prometheus"
		}
		if got := patched[id]; !maps.Equal(got, want) {
			t.Errorf("with README.md's patch, %s labels %v, want %v", id, got, want)
		}
	}
}
