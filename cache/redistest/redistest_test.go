package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of ending the
// test that runs it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server on it
	for _, tt := range []struct {
		require  string
		wantFail bool
	}{{"", false}, {"1", true}} {
		t.Run("require="+tt.require, func(t *testing.T) {
			t.Setenv(RequireEnv, tt.require)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); Start(r) }()
			<-done
			if tt.wantFail && !strings.Contains(r.fatal, "redis-server not found") {
				t.Errorf("with %s=1: fatal %q, skip %q; want a failure", RequireEnv, r.fatal, r.skip)
			}
			if !tt.wantFail && (r.skip == "" || r.fatal != "") {
				t.Errorf("without %s: fatal %q, skip %q; want a skip", RequireEnv, r.fatal, r.skip)
			}
		})
	}
}

func TestStopAndRestart(t *testing.T) {
	s := Start(t)
	if !s.pingRaw() {
		t.Fatal("not answering after Start")
	}
	s.Stop()
	if s.pingRaw() {
		t.Fatal("answering after Stop")
	}
	s.Restart()
	if !s.pingRaw() {
		t.Fatal("not answering after Restart")
	}
	s.Flush(t)
}
