package redistest

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Advance shortens every TTL by the time given and expires the keys whose TTL
// ends within it; keys without a TTL stay.
func TestAdvance(t *testing.T) {
	s := Start(t)
	s.command(t, "SET", "short", "v", "PX", "60000")
	s.command(t, "SET", "long", "v", "PX", "3600000")
	s.command(t, "SET", "forever", "v")
	if n := s.Advance(t, 2*time.Minute); n != 1 {
		t.Errorf("%d keys expired, want 1", n)
	}
	if got := s.command(t, "EXISTS", "short"); got != ":0" {
		t.Errorf("EXISTS short: %s, want it expired", got)
	}
	ttl, err := strconv.Atoi(strings.TrimPrefix(s.command(t, "PTTL", "long"), ":"))
	if err != nil || ttl > 3600000-120000 || ttl < 3600000-120000-60000 {
		t.Errorf("PTTL long: %d %v, want about 58 minutes", ttl, err)
	}
	if got := s.command(t, "PTTL", "forever"); got != ":-1" {
		t.Errorf("PTTL forever: %s, want no TTL", got)
	}
}
