package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
)

// streamingDaemon answers every render on a unix socket with a generate stream:
// the manifests (pattern, n times) in chunks of 64 KiB, made as they are sent,
// then trailer, or (trailer nil) no trailer: a daemon that breaks off. Before
// the trailer it calls held, if not nil.
func streamingDaemon(t *testing.T, pattern []byte, n int, trailer *api.GenerateResponse, held func()) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "air-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.GenerateStreamType)
		chunk := bytes.Repeat(pattern, max(1, (64<<10)/len(pattern)))
		for left := n; left > 0; {
			k := min(left, len(chunk)/len(pattern))
			if err := api.WriteChunk(w, chunk[:k*len(pattern)]); err != nil {
				return
			}
			left -= k
		}
		if trailer == nil {
			panic(http.ErrAbortHandler) // the connection is cut, no trailer
		}
		if held != nil {
			w.(http.Flusher).Flush()
			held()
		}
		api.WriteTrailer(w, *trailer) //nolint:errcheck
	})}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return socket
}

// The thin client prints the daemon's manifests only when the trailer says the
// render succeeded: a render that failed once some manifests were out prints
// nothing on stdout, its reason on stderr, and exits 1 (Argo CD reads stdout
// whole); a daemon that breaks off before its trailer is a daemon that did not
// render: the render runs in-process, and only its manifests are printed.
func TestStreamedAnswer(t *testing.T) {
	pattern := []byte("apiVersion: v1\nkind: ConfigMap\n---\n")
	manifests := bytes.Repeat(pattern, 10000) // 350 KB: several chunks
	for _, tt := range []struct {
		name       string
		trailer    *api.GenerateResponse
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{"rendered", &api.GenerateResponse{Stderr: "argocd-image-resolver: stale: web\n"}, 0, string(manifests),
			[]string{"argocd-image-resolver: stale: web"}},
		{"failed while writing", &api.GenerateResponse{Stderr: "argocd-image-resolver: render worker failed: the worker signal: killed\n", ExitCode: 1}, 1, "",
			[]string{"render worker failed"}},
		{"cut before the trailer", nil, 0, "fallback ran: generate\n",
			[]string{"generate stream cut after 350000 bytes", "rendering in-process", "fallback stderr"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			socket := streamingDaemon(t, pattern, 10000, tt.trailer, nil)
			stdout, stderr, _, code := runThin(t, api.SocketEnv+"="+socket)
			if code != tt.wantCode || stdout != tt.wantStdout {
				t.Errorf("exit %d, %d bytes of stdout (%.40q); want exit %d and %d bytes", code, len(stdout), stdout, tt.wantCode, len(tt.wantStdout))
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// The thin client passes 50 MB of manifests through a file, not its memory: its
// peak resident memory once it has them all (read while the daemon holds the
// trailer back) is under 32 MiB, and at its end (the kernel's count, which
// starts from this test process's when it is started) no more than for a small
// answer, give or take a few MiB.
func TestStreamedAnswerMemory(t *testing.T) {
	pattern := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n")
	_, small := thinPeakRSS(t, pattern, 1)
	received, big := thinPeakRSS(t, pattern, 50<<20/len(pattern))
	t.Logf("thin client peak RSS: %.1f MiB with 50 MiB of manifests received; at its end %.1f MiB, %.1f MiB for a small answer", received, big, small)
	if received >= 32 || big-small >= 8 {
		t.Errorf("peak RSS %.1f MiB once 50 MiB of manifests are in, %.1f MiB at the end (%.1f MiB for a small answer): want under 32 MiB, and under 8 MiB more", received, big, small)
	}
}

// thinPeakRSS runs the thin client against a daemon that answers pattern n times
// and returns its peak resident memory in MiB once it has received them, and as
// the kernel counts it at its end.
func thinPeakRSS(t *testing.T, pattern []byte, n int) (received, end float64) {
	t.Helper()
	var cmd *exec.Cmd
	socket := streamingDaemon(t, pattern, n, &api.GenerateResponse{}, func() {
		received = procStatusMiB(cmd.Process.Pid, "VmHWM")
	})
	cmd = exec.Command(thinBinary)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), api.SocketEnv+"="+socket)
	out, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := out.Stat(); fi.Size() != int64(len(pattern)*n) {
		t.Errorf("stdout %d bytes, want %d", fi.Size(), len(pattern)*n)
	}
	return received, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // KiB on Linux
}

// procStatusMiB reads a memory field (kB) of /proc/PID/status in MiB.
func procStatusMiB(pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}
