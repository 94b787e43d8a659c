package image

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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

// lockedBuffer collects a process's output for the test to read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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

	// The image as a user gets it: written to a tarball and loaded back by tag.
	ref, err := name.NewTag("ghcr.io/argocd-image-resolver/argocd-image-resolver:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(tarPath, testImage(t), ref); err != nil {
		t.Fatal(err)
	}
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
	provideRuntimeFiles(t, root, filepath.Join(bins, "cmpserver"))

	// The registry the render resolves against, on loopback (the chroot shares the
	// network).
	reg := registrytest.New(t)
	for _, tag := range []string{"1.0.0", "1.0.7", "1.1.0"} {
		reg.Push(t, "demo/web", tag, registrytest.Image(testCreated, "linux/amd64", registrytest.WithSeed(tag)))
	}
	repo := reg.Ref("demo/web")
	writeApp(t, root, repo+":1.0.0")

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

	t.Run("sidecar", func(t *testing.T) {
		metrics := freeAddr(t)
		params := fmt.Sprintf(`[{"name":"image-list","string":"web=%s:~1.0"}]`, repo)
		cmd := run(cf.Config.Entrypoint,
			"IMAGE_RESOLVER_METRICS_ADDR="+metrics,
			"IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64",
			"CMPSERVER_APP_DIR=/tmp/app",
			"CMPSERVER_PARAMETERS="+params)
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				_ = cmd.Process.Kill()
				<-done
			}
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
		}, done)
		if code := httpStatus(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d", code)
		}

		// The sidecar (the daemon's process: chroot execs the entrypoint in place) runs
		// as 999, and so does everything it writes.
		if uid, gid := processIDs(t, cmd.Process.Pid); uid != "999" || gid != "999" {
			t.Errorf("the sidecar runs as uid %s gid %s, want 999", uid, gid)
		}
		sock := filepath.Join(root, "tmp", "argocd-image-resolver.sock")
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
		}, done)
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
		if r.UID != 999 || r.GID != 999 || r.Home != "/home/argocd" || r.Socket != "/tmp/argocd-image-resolver.sock" ||
			r.GeneratePath != "/usr/local/bin/argocd-image-resolver-generate" {
			t.Errorf("the CMP server's child saw uid %d gid %d HOME %q socket %q generate %q; want 999 999 /home/argocd /tmp/argocd-image-resolver.sock /usr/local/bin/argocd-image-resolver-generate",
				r.UID, r.GID, r.Home, r.Socket, r.GeneratePath)
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
		case err := <-done:
			stopped = true
			if err != nil {
				t.Errorf("after SIGTERM the sidecar exited with %v, want 0", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the sidecar did not stop within 30s of SIGTERM")
		}
	})
}

// provideRuntimeFiles adds to root what a container runtime and Argo CD's pod give the
// container: /dev/null, and argocd-cmp-server in /var/run/argocd (here the stand-in).
func provideRuntimeFiles(t *testing.T, root, cmpServer string) {
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
	bin, err := os.ReadFile(cmpServer)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "var", "run", "argocd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "argocd-cmp-server"), bin, 0o755); err != nil {
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

// waitUntil polls cond until it holds, failing after timeout or if the process ends.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("the sidecar exited (%v) before %s", err, what)
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
