package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

// renderWorkerEnv makes this test binary a render worker (render.ServeWorker)
// when a daemon of a test starts it as one.
const renderWorkerEnv = "DAEMON_TEST_RENDER_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(webhookListenerEnv) == "1" {
		if err := webhook.ServeProcess(os.Stdin, os.Stdout, os.NewFile(3, "webhook listener")); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(renderWorkerEnv) == "1" {
		startSlowly() // as a worker linking Helm and Kustomize does
		if err := render.ServeWorker(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerCommand starts this test binary as a render worker (WithRenderWorkers).
func workerCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), renderWorkerEnv+"=1")
	return cmd
}

// writeBigApp writes a plain-YAML app of about size bytes into dir: deployments
// Deployments of image (each an image field a policy names), the rest ConfigMaps
// of 1 MiB. It returns the bytes written.
func writeBigApp(tb testing.TB, dir, image string, deployments int, size int64) int64 {
	tb.Helper()
	var total int64
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
		total += int64(len(content))
	}
	const perFile = 100
	for f := 0; f*perFile < deployments; f++ {
		var b strings.Builder
		for i := f * perFile; i < min((f+1)*perFile, deployments); i++ {
			fmt.Fprintf(&b, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-%05d\n  labels:\n    app: web-%05d\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web-%05d\n  template:\n    metadata:\n      labels:\n        app: web-%05d\n    spec:\n      containers:\n        - name: web\n          image: %s:1.0.0\n          ports:\n            - containerPort: 8080\n          env:\n            - name: INDEX\n              value: \"%d\"\n", i, i, i, i, image, i)
		}
		write(fmt.Sprintf("deployments-%03d.yaml", f), b.String())
	}
	line := strings.Repeat("0123456789abcdef", 64) // 1 KiB
	for c := 0; total < size; c++ {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: data-%03d\ndata:\n", c)
		for k := range 1024 {
			fmt.Fprintf(&b, "  key-%04d: %s\n", k, line)
		}
		write(fmt.Sprintf("configmap-%03d.yaml", c), b.String())
	}
	return total
}

// bigAppEnviron is the environment Argo CD gives a render of the big app: a
// policy naming image.
func bigAppEnviron(app, image string) []string {
	return []string{"ARGOCD_APP_NAME=" + app, "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_SOURCE_PATH=.",
		`ARGOCD_APP_PARAMETERS=[{"name":"image-list","string":"web=` + image + `:~1"},{"name":"web.platforms","string":"linux/amd64"}]`}
}

// daemonProcess is a daemon run as a process of its own (TestDaemonHelperProcess)
// with render workers, so that its memory is the daemon's alone.
type daemonProcess struct {
	cmd    *exec.Cmd
	socket string
}

func startDaemonProcess(tb testing.TB, cfg config.Config) *daemonProcess {
	tb.Helper()
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw), helperWorkersEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }() //nolint:errcheck
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, ok := strings.CutPrefix(strings.TrimSpace(line), "metrics="); err != nil || !ok {
		tb.Fatalf("daemon said %q: %v", line, err)
	}
	return &daemonProcess{cmd: cmd, socket: cfg.Socket}
}

// workersPeakMiB is the peak resident memory (VmHWM) of each of the daemon's
// render workers alive now.
func (p *daemonProcess) workersPeakMiB() []float64 {
	var peaks []float64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its ")"
		fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(p.cmd.Process.Pid) {
			peaks = append(peaks, procStatusMiB(pid, "VmHWM"))
		}
	}
	return peaks
}

// anonMiB is the daemon's anonymous resident memory (its heap and stacks, not the
// binary's pages).
func (p *daemonProcess) anonMiB() float64 { return procStatusMiB(p.cmd.Process.Pid, "RssAnon") }

// sampleAnonPeak samples the daemon's anonymous RSS every 10ms until stop is
// closed, and returns the peak on the channel.
func (p *daemonProcess) sampleAnonPeak(stop <-chan struct{}) <-chan float64 {
	peak := make(chan float64, 1)
	go func() {
		var m float64
		for {
			m = max(m, p.anonMiB())
			select {
			case <-stop:
				peak <- max(m, p.anonMiB())
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return peak
}
