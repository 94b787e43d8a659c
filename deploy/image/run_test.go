package image

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// cmpReport is what testdata/cmpserver writes (its Report).
type cmpReport struct {
	UID, GID       int
	Socket         string
	Home           string
	GeneratePath   string
	GenerateStdout string
	GenerateStderr string
	GenerateExit   int
	Error          string
}

// TestImageRunsAsArgoCDUser unpacks the image, as docker load and a container runtime
// would get it from bin/image.tar, and runs its entrypoint there as uid 999 with
// chroot --userspec, as Argo CD runs the sidecar: first `version` (the stamped version
// and commit), then `install` (the init container of deploy/legacy-argocd-cm), then
// `sidecar` with a stand-in for argocd-cmp-server, which runs
// plugin.yaml's generate command against a real registry. It checks that the daemon
// answers on its health endpoints and socket, that it and the child run as 999, that
// the render went through the daemon, and that SIGTERM stops the container cleanly.
func TestImageRunsAsArgoCDUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the image's entrypoint as uid 999 with chroot --userspec=999:999, which needs root; " +
			"run it as root (CI does), e.g. sudo go test ./deploy/image/")
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		t.Fatalf("this test needs chroot (coreutils): %v", err)
	}
	bins := staticBinaries(t)

	// The image as a user gets it: written to bin/image.tar as make image writes it
	// (here of this machine's platform only) and loaded back by tag, as docker load does.
	ref, err := name.NewTag("ghcr.io/argocd-image-resolver/argocd-image-resolver:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := BuildIndex(Options{Version: testVersion, Revision: testRevision, Created: testCreated}, bins)
	if err != nil {
		t.Fatal(err)
	}
	_, tarPath := writeOutputs(t, t.TempDir(), idx, ref, runtime.GOARCH)
	img, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// A short path: the daemon's socket lives under it, and unix socket paths are
	// limited to 108 bytes.
	root, err := os.MkdirTemp("", "img")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The root directory becomes /, which user 999 must be able to enter.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	unpack(t, img, root)
	if _, err := os.Lstat(filepath.Join(root, "bin", "sh")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image has /bin/sh (%v); it should have no shell", err)
	}
	// What the container runtime and Argo CD's pod add to the image's files: /dev/null
	// (os/exec gives it to children as stdin), the CMP server in the var-files volume
	// (here the stand-in), and an app checkout in /tmp.
	provideDevNull(t, root)

	// The registry the render resolves against, on loopback (the chroot shares the
	// network).
	reg := registrytest.New(t)
	for _, tag := range []string{"1.0.0", "1.0.7", "1.1.0"} {
		reg.Push(t, "demo/web", tag, registrytest.Image(testCreated, "linux/amd64", registrytest.WithSeed(tag)))
	}
	repo := reg.Ref("demo/web")

	// The image's user, entrypoint and environment, as a runtime uses them.
	run := func(args []string, extraEnv ...string) *exec.Cmd {
		if cf.Config.User != "999:999" {
			t.Fatalf("image user %q, want 999:999", cf.Config.User)
		}
		cmd := exec.Command(chroot, append([]string{"--userspec=" + cf.Config.User, root}, args...)...)
		cmd.Env = append(append([]string(nil), cf.Config.Env...), extraEnv...)
		return cmd
	}

	t.Run("version", func(t *testing.T) {
		out, err := run([]string{cf.Config.Entrypoint[0], "version", "-o", "json"}).CombinedOutput()
		if err != nil {
			t.Fatalf("version: %v\n%s", err, out)
		}
		var v struct{ Version, Commit, Platform string }
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("version -o json: %v\n%s", err, out)
		}
		if v.Version != testVersion || v.Commit != testRevision || v.Platform != "linux/"+cf.Architecture {
			t.Errorf("version = %+v, want %s %s linux/%s", v, testVersion, testRevision, cf.Architecture)
		}
	})

	// The init container of deploy/legacy-argocd-cm (Argo CD < 2.8): `install` copies
	// both binaries into a volume, with no shell or cp in the image. It finds itself
	// through /proc/self/exe, so this runs as a runtime does: in its own PID and mount
	// namespaces with /proc mounted (unshare --mount-proc; gone when it exits).
	t.Run("install", func(t *testing.T) {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Fatalf("this test needs unshare (util-linux): %v", err)
		}
		tools := filepath.Join(root, "custom-tools")
		for _, d := range []string{tools, filepath.Join(root, "proc")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// An emptyDir, writable by the pod's user.
		if err := os.Chmod(tools, 0o777); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(unshare, "--fork", "--pid", "--mount-proc="+filepath.Join(root, "proc"),
			chroot, "--userspec="+cf.Config.User, root, cf.Config.Entrypoint[0], "install", "/custom-tools")
		cmd.Env = cf.Config.Env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
		for _, b := range Binaries {
			got, err := os.ReadFile(filepath.Join(tools, b))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(root, "usr", "local", "bin", b))
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(filepath.Join(tools, b))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || st.Mode().Perm() != 0o755 || st.Sys().(*syscall.Stat_t).Uid != 999 {
				t.Errorf("installed %s: %d bytes (want %d), mode %v, owner %d; want the image's binary, 0755, 999",
					b, len(got), len(want), st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid)
			}
		}
	})

	// The sidecar as deploy/repo-server-sidecar.yaml runs it: its command, user,
	// environment and volumes (an emptyDir at /tmp, the plugin's config, the var-files
	// volume with argocd-cmp-server, here the stand-in) over a read-only root.
	t.Run("sidecar", func(t *testing.T) {
		pod := podFromManifest(t, cf, root, filepath.Join(bins, "cmpserver"))
		writeApp(t, root, repo+":1.0.0")
		metrics := freeAddr(t)
		params := fmt.Sprintf(`[{"name":"image-list","string":"web=%s:~1.0"}]`, repo)
		// The metrics port is the test's: others may listen on the manifest's.
		cmd := exec.Command(chroot, append([]string{"--userspec=" + pod.userspec, root}, pod.argv...)...)
		cmd.Env = append(pod.env,
			"IMAGE_RESOLVER_METRICS_ADDR="+metrics,
			"CMPSERVER_APP_DIR=/tmp/app",
			"CMPSERVER_PARAMETERS="+params)
		var out testio.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// exited is closed once the sidecar has exited, with its status in waitErr.
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			// Shown on failure and with -v.
			t.Logf("sidecar output:\n%s", out.String())
		})

		// The daemon answers on its health endpoints.
		base := "http://" + metrics
		waitUntil(t, 60*time.Second, "the daemon's /readyz", func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, exited)
		if code := httpStatus(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d", code)
		}

		// The sidecar (the daemon's process: chroot execs the entrypoint in place) runs
		// as 999, and so does everything it writes.
		if uid, gid := processIDs(t, cmd.Process.Pid); uid != "999" || gid != "999" {
			t.Errorf("the sidecar runs as uid %s gid %s, want 999", uid, gid)
		}
		sock := filepath.Join(root, filepath.FromSlash(pod.socket))
		st, err := os.Lstat(sock)
		if err != nil {
			t.Fatalf("the daemon's socket: %v", err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 999 || st.Mode().Type() != os.ModeSocket {
			t.Errorf("socket %s: owner %d, type %v; want a socket owned by 999", sock, s.Uid, st.Mode().Type())
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Errorf("the daemon's socket does not answer: %v", err)
		} else {
			conn.Close()
		}

		// The stand-in CMP server ran generate the way Argo CD does.
		reportPath := filepath.Join(root, "tmp", "cmpserver-report.json")
		waitUntil(t, 90*time.Second, "the stand-in CMP server's report", func() bool {
			_, err := os.Stat(reportPath)
			return err == nil
		}, exited)
		data, err := os.ReadFile(reportPath)
		if err != nil {
			t.Fatal(err)
		}
		var r cmpReport
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if r.Error != "" || r.GenerateExit != 0 {
			t.Fatalf("generate in the image: exit %d, error %q\nstdout:\n%s\nstderr:\n%s", r.GenerateExit, r.Error, r.GenerateStdout, r.GenerateStderr)
		}
		if r.UID != 999 || r.GID != 999 || r.Home != "/home/argocd" || r.Socket != pod.socket ||
			r.GeneratePath != "/usr/local/bin/argocd-image-resolver-generate" {
			t.Errorf("the CMP server's child saw uid %d gid %d HOME %q socket %q generate %q; want 999 999 /home/argocd %s /usr/local/bin/argocd-image-resolver-generate",
				r.UID, r.GID, r.Home, r.Socket, r.GeneratePath, pod.socket)
		}
		// ~1.0 among 1.0.0, 1.0.7 and 1.1.0.
		if !strings.Contains(r.GenerateStdout, "image: "+repo+":1.0.7") {
			t.Errorf("generate printed no %s:1.0.7:\n%s\nstderr:\n%s", repo, r.GenerateStdout, r.GenerateStderr)
		}
		if strings.Contains(r.GenerateStderr, "in-process") {
			t.Errorf("generate did not reach the daemon:\n%s", r.GenerateStderr)
		}
		// The daemon, not an in-process fallback, asked the registry.
		if n := metricSum(t, base+"/metrics", "argocd_image_resolver_registry_requests_total"); n == 0 {
			t.Error("the daemon counted no registry request")
		}
		if reg.Count(registrytest.Tags) == 0 {
			t.Error("the registry saw no tag list")
		}

		// SIGTERM, as the kubelet sends it: forwarded to the CMP server, then the daemon
		// stops; the container exits 0.
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("after SIGTERM the sidecar exited with %v, want 0", waitErr)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the sidecar did not stop within 30s of SIGTERM")
		}
	})
}

// provideDevNull adds /dev/null to root, as a container runtime does (os/exec gives
// it to children as stdin).
func provideDevNull(t *testing.T, root string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A character device 1:3, as /dev/null is everywhere.
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("creating /dev/null in the root: %v", err)
	}
	if err := os.Chmod(filepath.Join(root, "dev", "null"), 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, "dev", "null"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the /dev/null made for the image cannot be opened (%v): is %s on a filesystem mounted nodev? Set TMPDIR to one that is not", err, os.TempDir())
	}
	f.Close()
}

// pod is how deploy/repo-server-sidecar.yaml runs the image.
type pod struct {
	argv     []string
	userspec string   // UID:GID for chroot
	env      []string // the image's, then the container's
	socket   string   // the daemon's socket in the container
}

// podFromManifest reads the image-resolver container of deploy/repo-server-sidecar.yaml
// and prepares root as the kubelet and the runtime would for it: each emptyDir mount a
// fresh directory of mode 0777 (the kubelet's), the plugin's ConfigMap file, the
// var-files volume holding cmpServer as argocd-cmp-server (repo-server's init container
// copies it there), and, for readOnlyRootFilesystem, the image's own directories not
// writable. It checks that the manifest and the image agree on command and user.
func podFromManifest(t *testing.T, cf *v1.ConfigFile, root, cmpServer string) pod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "repo-server-sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatalf("deploy/repo-server-sidecar.yaml: %v", err)
	}
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "image-resolver" })
	if i < 0 {
		t.Fatal("deploy/repo-server-sidecar.yaml has no image-resolver container")
	}
	c := d.Spec.Template.Spec.Containers[i]
	// The patch mounts two volumes of repo-server's own; Argo CD's install manifests
	// declare both as emptyDirs.
	volumes := map[string]corev1.Volume{
		"var-files": {Name: "var-files", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		"plugins":   {Name: "plugins", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	// The runtime runs Command (else the image's entrypoint) with Args (else its Cmd).
	argv := append(append([]string(nil), cf.Config.Entrypoint...), cf.Config.Cmd...)
	if len(c.Command) > 0 {
		argv = append(append([]string(nil), c.Command...), c.Args...)
		if !slices.Equal(c.Command, cf.Config.Entrypoint) {
			t.Errorf("the manifest's command %q differs from the image's entrypoint %q", c.Command, cf.Config.Entrypoint)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil {
		t.Fatal("the manifest's container sets no runAsUser")
	}
	uid := *sc.RunAsUser
	if fmt.Sprint(uid)+":"+fmt.Sprint(GID) != cf.Config.User {
		t.Errorf("the manifest runs as uid %d, the image as %s", uid, cf.Config.User)
	}
	// Without runAsGroup the runtime takes the group of the uid's /etc/passwd entry.
	gid := passwdGID(t, root, uid)
	if sc.RunAsGroup != nil {
		gid = *sc.RunAsGroup
	}
	env := append([]string(nil), cf.Config.Env...)
	socket := "/tmp/image-resolver/daemon.sock" // the daemon's default
	for _, e := range c.Env {
		v := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
			v = "argocd"
		case from.ResourceFieldRef != nil && from.ResourceFieldRef.Divisor.IsZero():
			// The kubelet writes the container's resource in bytes (divisor 1).
			var q resource.Quantity
			switch from.ResourceFieldRef.Resource {
			case "limits.memory":
				q = c.Resources.Limits[corev1.ResourceMemory]
			case "requests.memory":
				q = c.Resources.Requests[corev1.ResourceMemory]
			default:
				t.Fatalf("env %s: resource %s is not known here", e.Name, from.ResourceFieldRef.Resource)
			}
			v = strconv.FormatInt(q.Value(), 10)
		default:
			t.Fatalf("env %s: only values, the namespace and memory resources are known here", e.Name)
		}
		env = append(env, e.Name+"="+v)
		if e.Name == "IMAGE_RESOLVER_SOCKET" {
			socket = v
		}
	}
	// Read-only root: the image's directories lose their write bits (uid 999 owns its
	// home), before the volumes are mounted over them.
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.IsDir() || p == filepath.Join(root, "dev") {
				return err
			}
			info, err := de.Info()
			if err != nil {
				return err
			}
			return os.Chmod(p, info.Mode()&^0o222)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("volume mount %s names no volume", m.Name)
		}
		p := filepath.Join(root, filepath.FromSlash(m.MountPath))
		switch {
		case v.EmptyDir != nil:
			// The kubelet makes an emptyDir 0777, root's, without the sticky bit.
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o777); err != nil {
				t.Fatal(err)
			}
			if m.MountPath == "/var/run/argocd" {
				copyFile(t, cmpServer, filepath.Join(p, "argocd-cmp-server"), 0o755)
			}
		case v.ConfigMap != nil && m.SubPath == "plugin.yaml":
			// The plugin ConfigMap holds the repository's plugin.yaml.
			mkdirAllRoot(t, filepath.Dir(p))
			copyFile(t, filepath.Join("..", "..", "plugin.yaml"), p, 0o644)
		case v.Projected != nil && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount":
			// No cluster here: without a token the refresh loop is off, as documented.
		default:
			t.Fatalf("volume mount %s at %s: teach this test what the kubelet puts there", m.Name, m.MountPath)
		}
	}
	return pod{argv: argv, userspec: fmt.Sprintf("%d:%d", uid, gid), env: env, socket: socket}
}

// passwdGID is the group of uid in root's /etc/passwd.
func passwdGID(t *testing.T, root string, uid int64) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[2] == fmt.Sprint(uid) {
			gid, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				t.Fatalf("/etc/passwd: %q", line)
			}
			return gid
		}
	}
	t.Fatalf("the image's /etc/passwd has no uid %d", uid)
	return 0
}

func mkdirAllRoot(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}

// writeApp writes a plain-YAML app to /tmp/app in root, owned by 999 as the CMP
// server's extracted checkout is.
func writeApp(t *testing.T, root, image string) {
	t.Helper()
	dir := filepath.Join(root, "tmp", "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: ` + image + "\n"
	p := filepath.Join(dir, "deployment.yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{dir, p} {
		if err := os.Lchown(q, 999, 999); err != nil {
			t.Fatal(err)
		}
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitUntil polls cond until it holds, failing after timeout or once exited is closed.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-exited:
			t.Fatalf("the sidecar exited before %s", what)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, timeout)
		}
	}
}

// processIDs returns a process's real user and group IDs from /proc.
func processIDs(t *testing.T, pid int) (uid, gid string) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "Uid:" {
			uid = f[1]
		}
		if len(f) >= 2 && f[0] == "Gid:" {
			gid = f[1]
		}
	}
	return uid, gid
}

// metricSum adds the values of every sample of metric in the Prometheus text at url.
func metricSum(t *testing.T, url, metric string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}
