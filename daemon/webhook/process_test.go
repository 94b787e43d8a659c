package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// listenerEnv makes this test binary a listener process (TestMain).
const listenerEnv = "IMAGE_RESOLVER_TEST_WEBHOOK_LISTENER"

func TestMain(m *testing.M) {
	if os.Getenv(listenerEnv) == "1" {
		if err := ServeProcess(os.Stdin, os.Stdout, os.NewFile(3, "listener")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// listenerCommand starts this test binary as the listener process.
func listenerCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), listenerEnv+"=1")
	return cmd
}

// processFixture is a listener process on a loopback port, with its sink, the
// registry its counts are registered on and its parent's log.
type processFixture struct {
	p    *Process
	addr string
	sink *recordingSink
	reg  *prometheus.Registry
	logs *syncBuffer
}

func startTestProcess(t *testing.T, sink Sink, opts ...ProcessOption) *processFixture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &processFixture{addr: ln.Addr().String(), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	if rs, ok := sink.(*recordingSink); ok {
		f.sink = rs
	}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secrets := Secrets{"distribution": []byte(secretOf("distribution")), "dockerhub": []byte(secretOf("dockerhub"))}
	p, err := StartProcess(listenerCommand, ln.(*net.TCPListener), secrets, sink, append([]ProcessOption{WithProcessLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	f.reg.MustRegister(p)
	f.p = p
	select {
	case <-p.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("the listener process did not serve within 10s; its parent logged:\n%s", f.logs)
	}
	return f
}

// post sends a distribution push of repo:tag with event id and secret, and
// returns the answer's status and body.
func (f *processFixture) post(t *testing.T, secret, id, repo string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"events":[{"id":%q,"timestamp":"2026-12-05T12:00:00Z","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":100,"digest":"sha256:%064x","length":100,"repository":%q,"tag":"v1"},"request":{"host":"registry.example:5000","method":"PUT"}}]}`,
		id, 7, repo)
	req, _ := http.NewRequest(http.MethodPost, "http://"+f.addr+"/webhooks/distribution", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// count is one series of webhook_events_total as the parent's registry gives it.
func (f *processFixture) count(t *testing.T, kind, outcome string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "argocd_image_resolver_webhook_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no webhook_events_total{kind=%q,outcome=%q}", kind, outcome)
	return 0
}

func (f *processFixture) pid() int { return f.p.Pid() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProcessHandsPushesToItsParent(t *testing.T) {
	f := startTestProcess(t, &recordingSink{unused: map[string]bool{"unrelated/x": true}})
	for _, c := range []struct {
		secret, id, repo string
		status           int
		answer           string
	}{
		{secretOf("distribution"), "e-1", "team/web", 200, "accepted 1, unused 0, ignored 0, replay 0"},
		{secretOf("distribution"), "e-2", "unrelated/x", 200, "accepted 0, unused 1, ignored 0, replay 0"},
		{wrongSecret("distribution"), "e-3", "team/web", 401, "unauthorized"},
		{secretOf("distribution"), "e-1", "team/web", 200, "accepted 0, unused 0, ignored 0, replay 1"},
	} {
		if status, answer := f.post(t, c.secret, c.id, c.repo); status != c.status || answer != c.answer {
			t.Errorf("post %s %s: %d %q, want %d %q", c.id, c.repo, status, answer, c.status, c.answer)
		}
	}
	got := f.sink.got()
	want := []Event{
		{Kind: "distribution", Registry: "registry.example:5000", Repository: "team/web", Tag: "v1", Digest: fmt.Sprintf("sha256:%064x", 7)},
		{Kind: "distribution", Registry: "registry.example:5000", Repository: "unrelated/x", Tag: "v1", Digest: fmt.Sprintf("sha256:%064x", 7)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the parent's sink got %+v, want %+v", got, want)
	}
	for outcome, want := range map[string]float64{"accepted": 1, "unused": 1, "unauthorized": 1, "replay": 1, "rate-limited": 0} {
		if got := f.count(t, "distribution", outcome); got != want {
			t.Errorf("events{distribution,%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := f.count(t, "dockerhub", "accepted"); got != 0 {
		t.Errorf("events{dockerhub,accepted} = %v, want a series at 0", got)
	}
	logs := f.logs.String()
	for _, want := range []string{"webhook listener process serving", `msg="webhook unauthorized" kind=distribution`, "process=webhook-listener",
		`msg="webhook push" kind=distribution registry=registry.example:5000 repository=team/web`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the parent's log has no %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, secretOf("distribution")) || strings.Contains(logs, wrongSecret("distribution")) {
		t.Errorf("a secret in the log:\n%s", logs)
	}
}

func TestProcessRunsIdleAndKeepsSecretsOffItsCommandLine(t *testing.T) {
	f := startTestProcess(t, &recordingSink{})
	pid := f.pid()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 2 {
		t.Fatalf("%d threads in the listener process: want a Go runtime's", len(tasks))
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		// Each thread's own nice value (Linux keeps one per thread).
		prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended
		}
		if nice := 20 - prio; nice != DefaultNice { // the raw call returns 20 - nice
			t.Errorf("thread %d of the listener process has nice %d, want %d", tid, nice, DefaultNice)
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy != unix.SCHED_IDLE {
			t.Errorf("thread %d of the listener process has scheduling policy %d, want SCHED_IDLE (%d)", tid, attr.Policy, unix.SCHED_IDLE)
		}
	}
	if prio, _ := syscall.Getpriority(syscall.PRIO_PROCESS, os.Getpid()); 20-prio != 0 {
		t.Errorf("the parent's own nice changed to %d", 20-prio)
	}
	if attr, err := unix.SchedGetAttr(os.Getpid(), 0); err != nil || attr.Policy != unix.SCHED_NORMAL {
		t.Errorf("the parent's own policy: %+v, %v; want SCHED_NORMAL", attr, err)
	}
	for _, file := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secretOf("distribution"))) {
			t.Errorf("the secret is in the listener's /proc/%d/%s", pid, file)
		}
	}
}

func TestProcessStartsAgainAndItsCountsGoOn(t *testing.T) {
	f := startTestProcess(t, &recordingSink{})
	if status, _ := f.post(t, secretOf("distribution"), "e-1", "team/web"); status != 200 {
		t.Fatalf("status %d", status)
	}
	if got := f.count(t, "distribution", "accepted"); got != 1 {
		t.Fatalf("accepted %v, want 1", got)
	}
	first := f.pid()
	syscall.Kill(first, syscall.SIGKILL) //nolint:errcheck
	deadline := time.Now().Add(15 * time.Second)
	for f.pid() == first || f.pid() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no listener started again after the first was killed; log:\n%s", f.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The port stayed bound by the parent: a delivery waits in the backlog
	// until the new process serves, and is answered.
	if status, answer := f.post(t, secretOf("distribution"), "e-2", "team/web"); status != 200 {
		t.Fatalf("after the restart: %d %q", status, answer)
	}
	if got := f.count(t, "distribution", "accepted"); got != 2 {
		t.Errorf("accepted %v after the restart, want 2 (the first child's 1 kept)", got)
	}
	if !strings.Contains(f.logs.String(), "webhook listener process exited; starting another") {
		t.Errorf("the exit is not logged:\n%s", f.logs)
	}
}

// stallingSink takes no push until released.
type stallingSink struct {
	release chan struct{}
	recordingSink
}

func (s *stallingSink) Push(ctx context.Context, ev Event) (bool, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return s.recordingSink.Push(ctx, ev)
}

func TestProcessAnswers503WhileItsParentDoesNotTakePushes(t *testing.T) {
	sink := &stallingSink{release: make(chan struct{})}
	f := startTestProcess(t, sink, WithPushTimeout(300*time.Millisecond))
	status, answer := f.post(t, secretOf("distribution"), "e-1", "team/web")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("a push the parent does not take: %d %q, want 503", status, answer)
	}
	close(sink.release)
	// The sender's retry is taken, not dropped as a replay.
	if status, answer := f.post(t, secretOf("distribution"), "e-1", "team/web"); status != 200 || answer != "accepted 1, unused 0, ignored 0, replay 0" {
		t.Errorf("the retry: %d %q, want 200 accepted 1", status, answer)
	}
	if got := f.count(t, "distribution", "unavailable"); got != 1 {
		t.Errorf("unavailable %v, want 1", got)
	}
	if n := len(sink.got()); n != 1 {
		t.Errorf("the sink took %d pushes, want 1", n)
	}
}

func TestProcessStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := StartProcess(listenerCommand, ln.(*net.TCPListener), Secrets{"distribution": []byte(secretOf("distribution"))}, &recordingSink{})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Ready()
	p.mu.Lock()
	cmd := p.cur.cmd
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Stop(ctx)
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("the listener process after Stop: %v, want exited 0", cmd.ProcessState)
	}
	if _, err := StartProcess(listenerCommand, ln.(*net.TCPListener), Secrets{"gitlab": []byte(secretOf("gitlab"))}, &recordingSink{}); err == nil ||
		!strings.Contains(err.Error(), `unknown kind "gitlab"`) {
		t.Errorf("an unknown kind: %v", err)
	}
}

func TestProcessTakesItsLimits(t *testing.T) {
	f := startTestProcess(t, &recordingSink{}, WithProcessLimits(Limits{Rate: 0.01, Burst: 1, MaxWait: time.Millisecond, MaxBody: 64}))
	// The body bound: a push event is over 64 bytes.
	if status, _ := f.post(t, secretOf("distribution"), "e-1", "team/web"); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over MaxBody: %d, want 413", status)
	}
	// The rate: the burst of 1 was spent on the request above; the next turn is
	// 100s away, over MaxWait.
	if status, _ := f.post(t, secretOf("distribution"), "e-2", "team/web"); status != http.StatusTooManyRequests {
		t.Errorf("a delivery over the rate: %d, want 429", status)
	}
	if got := f.count(t, "distribution", "rate-limited"); got != 1 {
		t.Errorf("rate-limited %v, want 1", got)
	}
}
