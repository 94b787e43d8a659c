package argocde2e

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

var paths Paths

func TestMain(m *testing.M) {
	var err error
	if paths, err = FindPaths(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, l := range KillLeftovers(os.TempDir()) {
		fmt.Fprintln(os.Stderr, "argocd e2e:", l)
	}
	// An interrupted run (Ctrl-C, CI cancelling) still ends every process it started.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "argocd e2e: %s: killing every process the tests started\n", s)
		killEverything()
		os.Exit(2)
	}()
	os.Exit(m.Run())
}

// startLab starts a control plane of version v for t and stops it when t ends. If t
// failed, the run dir stays and the end of every log is printed.
func startLab(t *testing.T, v string) *Lab { return startWith(t, v, StartLab) }

// startKubeLab is startLab for the lab without Argo CD's processes.
func startKubeLab(t *testing.T, v string) *Lab { return startWith(t, v, StartKubeLab) }

func startWith(t *testing.T, v string, start func(Paths, string) (*Lab, error)) *Lab {
	t.Helper()
	if err := CheckTools(paths, v); err != nil {
		t.Fatal(err)
	}
	lab, err := start(paths, v)
	if err != nil {
		if lab != nil {
			printLogs(t, lab)
		}
		t.Fatal(err)
	}
	t.Logf("lab of Argo CD %s up in %s (run dir %s): argocd-server %q, git %q, registry %s behind %s",
		v, lab.StartedIn.Round(time.Millisecond), lab.Dir, lab.ServerAddr, lab.GitURL, lab.RegistryHost, lab.Proxy.Addr)
	t.Cleanup(func() {
		var stops strings.Builder
		t0 := time.Now()
		lab.Stop(&stops)
		t.Logf("stopped in %s:\n%s", time.Since(t0).Round(time.Millisecond), stops.String())
		if t.Failed() || os.Getenv("E2E_KEEP") != "" {
			printLogs(t, lab)
			t.Logf("logs kept in %s", lab.Logs)
			return
		}
		if err := os.RemoveAll(lab.Dir); err != nil {
			t.Logf("removing %s: %v", lab.Dir, err)
		}
	})
	return lab
}

// printLogs prints the last lines of every log of the lab.
func printLogs(t *testing.T, lab *Lab) {
	files, _ := filepath.Glob(filepath.Join(lab.Logs, "*.log"))
	sort.Strings(files)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("==== last lines of %s:\n%s", f, strings.Join(lines, "\n"))
	}
}
