package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// startDaemon runs `argocd-image-resolver serve` as a process on a socket in a short
// temp dir and waits until it answers.
func startDaemon(t testing.TB, registriesCfg string, flags ...string) (socket string, stop func()) {
	t.Helper()
	return startDaemonEnv(t, nil, append([]string{"--registries-config", registriesCfg}, flags...)...)
}

// startDaemonEnv runs serve with exactly env (plus PATH, HOME, an empty
// DOCKER_CONFIG) and flags.
func startDaemonEnv(t testing.TB, env map[string]string, flags ...string) (socket string, stop func()) {
	t.Helper()
	return startServe(t, binary, env, flags...)
}

// startDaemonBinary is startDaemon with the serve of the binary serve.
func startDaemonBinary(t testing.TB, serve, registriesCfg string) (socket string, stop func()) {
	t.Helper()
	return startServe(t, serve, nil, "--registries-config", registriesCfg)
}

// startServe runs serve's `serve` with exactly env (plus PATH, HOME, an empty
// DOCKER_CONFIG) and flags, and returns once its socket answers.
func startServe(t testing.TB, serve string, env map[string]string, flags ...string) (socket string, stop func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "air")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "d.sock")
	args := append([]string{"serve", "--socket", socket, "--metrics-addr", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(serve, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "DOCKER_CONFIG=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // exit observed through done
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // may have exited
		<-done
	}
	t.Cleanup(stop)
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			return socket, stop
		}
		select {
		case <-done:
			t.Fatalf("daemon exited: %s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if i > 500 {
			t.Fatalf("daemon did not listen on %s: %s", socket, logs.String())
		}
	}
}

func TestGenerateThroughDaemon(t *testing.T) {
	s, cfg := demoRegistry(t)
	socket, stop := startDaemon(t, cfg)
	env := map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"}
	gen := func() run {
		t.Helper()
		// generate's own registries config points nowhere: answers must come from the daemon.
		e := map[string]string{"IMAGE_RESOLVER_SOCKET": socket}
		for k, v := range env {
			e[k] = v
		}
		return delegateEnv(t, "../../testdata/apps/plain-cron", e)
	}

	first := gen()
	if first.code != 0 || strings.Contains(first.stderr, "unreachable") {
		t.Fatalf("first render: exit %d: %s", first.code, first.stderr)
	}
	if s.Total() == 0 {
		t.Fatal("the daemon made no registry request for a cold render")
	}
	s.ResetCounts()
	second := gen()
	if second.code != 0 || second.stdout != first.stdout {
		t.Fatalf("second render: exit %d, output differs: %s", second.code, second.stderr)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("second render within the TTL made %d registry requests (%v), want 0", n, s.Counts())
	}

	// Kill the daemon between renders: the next generate falls back and succeeds.
	stop()
	third := delegateEnv(t, "../../testdata/apps/plain-cron", map[string]string{
		"IMAGE_RESOLVER_SOCKET": socket, "IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg,
		"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"})
	if third.code != 0 || third.stdout != first.stdout {
		t.Fatalf("render without the daemon: exit %d: %s", third.code, third.stderr)
	}
	if !strings.Contains(third.stderr, "daemon unreachable") || strings.Count(strings.TrimSpace(third.stderr), "\n") != 0 {
		t.Errorf("fallback must be said in one stderr line, got %q", third.stderr)
	}
}

// Stale-if-error through the real daemon: a registry that fails for everything after
// the TTLs expired still renders, from the last good answers, flagged on the objects
// and on stderr; a daemon with nothing cached fails with the registry's answer.
func TestGenerateStaleIfError(t *testing.T) {
	s, cfg := demoRegistry(t)
	socket, _ := startDaemon(t, cfg, "--tag-ttl", "1s", "--head-ttl", "1s", "--refresh-ahead", "0")
	env := map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"}
	dir := "../../testdata/apps/plain-cron"
	fresh := delegateEnv(t, dir, env)
	if fresh.code != 0 || strings.Contains(fresh.stdout, "argocd-image-resolver/stale") {
		t.Fatalf("fresh render: exit %d, stale annotation present: %s", fresh.code, fresh.stderr)
	}
	s.Inject(rt.Fault{Status: http.StatusServiceUnavailable})
	time.Sleep(1100 * time.Millisecond) // let every TTL of the daemon expire
	s.ResetCounts()
	stale := delegateEnv(t, dir, env)
	if stale.code != 0 {
		t.Fatalf("stale render: exit %d: %s", stale.code, stale.stderr)
	}
	if images(t, stale.stdout)[0] != images(t, fresh.stdout)[0] {
		t.Errorf("stale render changed images: %v vs %v", images(t, stale.stdout), images(t, fresh.stdout))
	}
	for _, want := range []string{"argocd-image-resolver/stale: 'batch'", "argocd-image-resolver/stale: 'web'"} {
		if !strings.Contains(stale.stdout, want) {
			t.Errorf("output lacks %q:\n%s\nstderr: %s", want, stale.stdout, stale.stderr)
		}
	}
	if !strings.Contains(stale.stderr, "stale:") {
		t.Errorf("stderr does not say the answers are stale: %q", stale.stderr)
	}
	// One attempt per repository's tag list, no retries: with a last good answer in
	// hand the daemon serves it at once instead of waiting out backoffs.
	if n := s.Count(rt.Tags); n != 2 {
		t.Errorf("tag list requests during the stale render = %d (%v), want 2: one per repository", n, s.Counts())
	}

	coldSocket, _ := startDaemon(t, cfg)
	cold := delegateEnv(t, dir, map[string]string{"IMAGE_RESOLVER_SOCKET": coldSocket, "ARGOCD_APP_NAME": "shop"})
	if cold.code != 1 || cold.stdout != "" || !strings.Contains(cold.stderr, "UNAVAILABLE") {
		t.Errorf("cold daemon, registry down: exit %d, stdout %d bytes, stderr %q; want exit 1 with the registry's answer", cold.code, len(cold.stdout), cold.stderr)
	}
}

// plugin.yaml's generate command, argocd-image-resolver-generate: the daemon renders,
// byte for byte as generate would; without a daemon it runs generate in its place.
func TestThinGenerate(t *testing.T) {
	s, cfg := demoRegistry(t)
	socket, stop := startDaemon(t, cfg)
	for _, app := range []string{"helm-web", "kustomize-overlay/overlay", "plain-cron", "arm64-pinned"} {
		dir := filepath.Join("../../testdata/apps", app)
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop", "ARGOCD_APP_SOURCE_PATH": "testdata/apps/" + app}
		direct := generate(t, dir, map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "shop",
			"ARGOCD_APP_NAMESPACE": "shop", "ARGOCD_APP_SOURCE_PATH": "testdata/apps/" + app})
		env["IMAGE_RESOLVER_SOCKET"] = socket
		thin := runIn(t, abs, env, thinBinary)
		if thin.code != 0 || direct.code != 0 || thin.stdout != direct.stdout {
			t.Errorf("%s: thin exit %d (%s), direct exit %d (%s): outputs differ", app, thin.code, thin.stderr, direct.code, direct.stderr)
		}
		if strings.Contains(thin.stderr, "unreachable") {
			t.Errorf("%s: thin generate did not reach the daemon: %s", app, thin.stderr)
		}
	}
	s.ResetCounts()
	again := runIn(t, "../../testdata/apps/plain-cron", map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": "shop"}, thinBinary)
	if again.code != 0 || s.Total() != 0 {
		t.Errorf("warm delegated render: exit %d, %d registry requests; want 0, 0", again.code, s.Total())
	}

	bad := runIn(t, "../../testdata/apps/plain-cron", map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": "shop",
		"ARGOCD_APP_PARAMETERS": params("web.update-strategy", "fastest")}, thinBinary)
	if bad.code != 1 || bad.stdout != "" || !strings.Contains(bad.stderr, `parameter "web.update-strategy": invalid value "fastest"`) {
		t.Errorf("bad parameter through the daemon: exit %d, stdout %q, stderr %q", bad.code, bad.stdout, bad.stderr)
	}

	stop()
	fallback := runIn(t, "../../testdata/apps/plain-cron", map[string]string{"IMAGE_RESOLVER_SOCKET": socket,
		"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "shop"}, thinBinary)
	if fallback.code != 0 || fallback.stdout != again.stdout || !strings.Contains(fallback.stderr, "daemon unreachable") {
		t.Errorf("daemon down: exit %d, stderr %q; want the same output, rendered in-process", fallback.code, fallback.stderr)
	}
}

// A Helm template that loops for minutes, rendered through the daemon: the render
// fails at renderTimeout with a message that says so, and the daemon's worker that
// ran it is gone (killed, not left burning a CPU); the next render gets a new one.
func TestDaemonStopsALoopingTemplate(t *testing.T) {
	_, cfg := demoRegistry(t)
	// A worker bound high enough that the loop meets its deadline first.
	socket, _ := startDaemon(t, cfg, "--render-timeout", "2s", "--render-workers", "1", "--render-worker-memory", "1GiB", "--memory-budget", "2GiB")
	daemonPID := pidOf(t, socket)
	env := map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": "loop",
		"ARGOCD_APP_SOURCE_PATH": "testdata/hostile/helm-loop"}
	loop := runIn(t, "../../testdata/hostile/helm-loop", env, thinBinary)
	if loop.code != 1 || !strings.Contains(loop.stderr, "the render did not finish within 2s (renderTimeout)") ||
		!strings.Contains(loop.stderr, "its worker was stopped") {
		t.Fatalf("looping template: exit %d, stderr %q; want exit 1 naming the deadline and the stopped worker", loop.code, loop.stderr)
	}
	if w := renderWorkers(t, daemonPID); len(w) != 0 {
		t.Fatalf("render workers %v still run after the deadline", w)
	}
	env["ARGOCD_APP_SOURCE_PATH"] = "testdata/apps/plain-cron"
	if ok := runIn(t, "../../testdata/apps/plain-cron", env, thinBinary); ok.code != 0 || strings.Contains(ok.stderr, "unreachable") {
		t.Fatalf("render after the stopped one: exit %d: %s", ok.code, ok.stderr)
	}
	w := renderWorkers(t, daemonPID)
	if len(w) != 1 {
		t.Fatalf("render workers %v after one render, want 1 (kept for the next)", w)
	}
	// A worker runs charts: it gets none of the daemon's settings or credentials.
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(w[0]) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(environ), "GOMEMLIMIT=") {
		t.Error("render worker has no GOMEMLIMIT: its garbage collector would not work to stay under renderWorkerMemory")
	}
	for kv := range strings.SplitSeq(string(environ), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "GOMEMLIMIT" && v != strconv.Itoa((1<<30)/10*9):
			t.Errorf("render worker's GOMEMLIMIT %s, want nine tenths of renderWorkerMemory", v)
		case kv != "" && k != "PATH" && k != "HOME" && k != "GOMEMLIMIT":
			t.Errorf("render worker inherited %s", k)
		}
	}
}

// pidOf finds the daemon process serving socket.
func pidOf(t *testing.T, socket string) int {
	t.Helper()
	for _, p := range processes(t) {
		if strings.Contains(p.cmdline, socket) {
			return p.pid
		}
	}
	t.Fatalf("no process serves %s", socket)
	return 0
}

// renderWorkers lists the render-worker processes whose parent is pid.
func renderWorkers(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	for _, p := range processes(t) {
		if p.ppid == pid && strings.Contains(p.cmdline, "render-worker") && p.state != "Z" {
			out = append(out, p.pid)
		}
	}
	return out
}

type process struct {
	pid, ppid      int
	state, cmdline string
}

func processes(t *testing.T) []process {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err1 := os.ReadFile("/proc/" + e.Name() + "/status")
		cmdline, err2 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err1 != nil || err2 != nil {
			continue
		}
		p := process{pid: pid, cmdline: strings.ReplaceAll(string(cmdline), "\x00", " ")}
		for line := range strings.SplitSeq(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				p.ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				p.state, _, _ = strings.Cut(strings.TrimSpace(v), " ")
			}
		}
		out = append(out, p)
	}
	return out
}
