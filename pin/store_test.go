package pin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// blob is a file a fast-import commit adds: size bytes, random (incompressible)
// or zeros (compressing hundreds to one).
type blob struct {
	path  string
	size  int64
	zeros bool
}

// addBlobs commits blobs on main of the bare repository name with git
// fast-import, streaming their content (nothing of it held in memory), stored
// at compression level (0: stored as they are, so that serving them costs no
// deflating). Files above 1 MiB are never deltified (core.bigFileThreshold), so
// that serving them costs no delta search either.
func addBlobs(t *testing.T, s *gittest.Server, name string, level int, blobs ...blob) {
	t.Helper()
	start := time.Now()
	for k, v := range map[string]string{"core.bigFileThreshold": "1m", "core.compression": strconv.Itoa(level), "pack.compression": strconv.Itoa(level)} {
		s.Git(t, name, "config", k, v)
	}
	tip := strings.TrimSpace(s.Git(t, name, "rev-parse", "refs/heads/main"))
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = s.Dir(name)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(in, 1<<20)
	fmt.Fprintf(w, "commit refs/heads/main\ncommitter Big <big@example.com> 1700000000 +0000\ndata 9\nbig files\nfrom %s\n", tip)
	rng := rand.NewChaCha8([32]byte{1})
	for _, b := range blobs {
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", b.path, b.size)
		var src io.Reader = rng
		if b.zeros {
			src = zeroReader{}
		}
		if _, err := io.CopyN(w, src, b.size); err != nil {
			t.Fatal(err)
		}
		w.WriteString("\n")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("git fast-import: %v: %s", err, stderr.String())
	}
	t.Logf("%s: %d files committed in %v", name, len(blobs), time.Since(start).Round(time.Millisecond))
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// countingServer serves s through a handler that counts the bytes of its
// answers: what clients fetch.
func countingServer(t *testing.T, s *gittest.Server) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(&countingWriter{ResponseWriter: w, n: &n}, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// memoryPeak samples the Go heap while it runs, and resets the process's peak
// resident memory (VmHWM) when it starts.
type memoryPeak struct {
	stop chan struct{}
	done chan struct{}
	heap uint64
	base uint64
}

func watchMemory() *memoryPeak {
	runtime.GC()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux)
	m := &memoryPeak{stop: make(chan struct{}), done: make(chan struct{}), base: heapBytes()}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			m.heap = max(m.heap, heapBytes())
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// end returns the peak heap above what it was at the start, and the peak
// resident memory of the process since the start (0 where unknown), in bytes.
func (m *memoryPeak) end() (heap, hwm uint64) {
	close(m.stop)
	<-m.done
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			hwm = kb << 10
		}
	}
	return m.heap - min(m.base, m.heap), hwm
}

const mib = 1 << 20

// A repository whose tip holds 1 GiB (four incompressible 256 MiB files
// beside the app's pins) is refused by name once a fetch has transferred the
// writer's bound, 256 MiB by default: the error names the repository, the
// bound and the setting; nothing is pushed; the writer's heap stays well below
// the bound. A tip that compresses to about a megabyte (256 MiB of zeros, a
// bound of 64 MiB) is refused too, from the sizes its pack declares, before
// go-git inflates anything. A normal repository beside, on the same writer, is written as
// usual.
func TestWriterBoundsWhatItFetches(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 GiB of test repositories")
	}
	f := newFixture(t)
	big := gittest.New(t)
	big.Init(t, "big.git", initialFiles)
	addBlobs(t, big, "big.git", 0,
		blob{path: "assets/a.bin", size: 256 * mib}, blob{path: "assets/b.bin", size: 256 * mib},
		blob{path: "assets/c.bin", size: 256 * mib}, blob{path: "assets/d.bin", size: 256 * mib})
	big.Init(t, "bomb.git", initialFiles)
	addBlobs(t, big, "bomb.git", 1, blob{path: "assets/zeros.bin", size: 256 * mib, zeros: true})
	bigURL, served := countingServer(t, big)
	w := f.writer(pin.WithRetry(1, time.Millisecond))

	cases := []struct {
		repo  string
		bound int64 // 0: the default
		what  string
	}{
		{"big.git", 0, "transferred"},
		// a bound below the zeros, which compress to about 1 MiB
		{"bomb.git", 64 * mib, "would hold (inflated)"},
	}
	for _, c := range cases {
		t.Run(c.repo, func(t *testing.T) {
			bound := pin.DefaultMaxRepositoryBytes
			w := w
			if c.bound > 0 {
				bound = c.bound
				w = f.writer(pin.WithRetry(1, time.Millisecond), pin.WithMaxRepositoryBytes(bound))
			}
			served.Store(0)
			ch := f.change("", "web", "web", "1.2.3", "1.3.0")
			ch.RepoURL = bigURL + "/" + c.repo
			mem := watchMemory()
			start := time.Now()
			_, err := w.Write(context.Background(), []pin.Change{ch})
			took := time.Since(start)
			heap, hwm := mem.end()
			t.Logf("%s: refused after %v; fetched %d bytes (%.1f MiB); heap peak +%.1f MiB; VmHWM %.1f MiB",
				c.repo, took.Round(time.Millisecond), served.Load(), float64(served.Load())/mib, float64(heap)/mib, float64(hwm)/mib)
			var tl *pin.TooLargeError
			if !errors.As(err, &tl) || !errors.Is(err, pin.ErrRepositoryTooLarge) {
				t.Fatalf("error %v, want a *pin.TooLargeError", err)
			}
			for _, want := range []string{ch.RepoURL, fmt.Sprintf("%dMiB", bound/mib), "git.maxRepositoryBytes", c.what} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if n := big.Pushes(c.repo); n != 0 {
				t.Errorf("%d pushes", n)
			}
			if heap > uint64(bound) {
				t.Errorf("heap peak +%d bytes, above the bound %d", heap, bound)
			}
			if served.Load() > bound+16*mib {
				t.Errorf("fetched %d bytes: the fetch went on past the bound", served.Load())
			}
		})
	}

	res, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil || !res.Pushed {
		t.Fatalf("the normal repository beside: %+v, %v", res, err)
	}
	if got := f.s.File(t, repoName, "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("pins.txt %q", got)
	}
}

// A repository within the bound (96 MiB of incompressible files beside the
// app's pins) is written: the files are fetched, kept on disk and never read;
// the writer's heap peak is reported.
func TestWriterWithinItsBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 96 MiB of test repositories")
	}
	s := gittest.New(t)
	s.Init(t, "assets.git", initialFiles)
	addBlobs(t, s, "assets.git", 0, blob{path: "assets/a.bin", size: 32 * mib},
		blob{path: "assets/b.bin", size: 32 * mib}, blob{path: "assets/c.bin", size: 32 * mib})
	url, served := countingServer(t, s)
	f := &fixture{s: s, url: url + "/assets.git"}
	w := pin.NewWriter(pin.WithRetry(1, time.Millisecond))
	mem := watchMemory()
	start := time.Now()
	res, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	took := time.Since(start)
	heap, hwm := mem.end()
	t.Logf("assets.git (96 MiB): written in %v; fetched %.1f MiB; heap peak +%.1f MiB; VmHWM %.1f MiB",
		took.Round(time.Millisecond), float64(served.Load())/mib, float64(heap)/mib, float64(hwm)/mib)
	if err != nil || !res.Pushed {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := s.File(t, "assets.git", "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("pins.txt %q", got)
	}
	if heap > uint64(pin.DefaultMaxRepositoryBytes) {
		t.Errorf("heap peak +%d bytes, above the bound %d", heap, pin.DefaultMaxRepositoryBytes)
	}
}
