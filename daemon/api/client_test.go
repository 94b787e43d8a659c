package api

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTimeoutFromEnv(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", DefaultTimeout, false}, {"5s", 5 * time.Second, false}, {" 2m ", 2 * time.Minute, false},
		{"0", DefaultTimeout, true}, {"-1s", DefaultTimeout, true}, {"soon", DefaultTimeout, true},
	} {
		t.Setenv(TimeoutEnv, tt.env)
		got, err := TimeoutFromEnv()
		if got != tt.want || (err != nil) != tt.bad {
			t.Errorf("%s=%q: %s, %v; want %s, error %v", TimeoutEnv, tt.env, got, err, tt.want, tt.bad)
		}
	}
	if DefaultTimeout >= 90*time.Second-30*time.Second {
		t.Errorf("DefaultTimeout %s leaves the fallback less than 30s of Argo CD's 90s", DefaultTimeout)
	}
}

// A daemon that accepts and never answers is unavailable at the deadline; a
// caller's own cancellation is its own error.
func TestCallWithinSilentDaemon(t *testing.T) {
	dir, err := os.MkdirTemp("", "dlg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	start := time.Now()
	_, err = CallWithin(context.Background(), socket, GenerateRequest{Dir: "/app"}, 300*time.Millisecond, io.Discard)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s", took)
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("err = %v, want unavailable, no answer within 300ms", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = CallWithin(ctx, socket, GenerateRequest{Dir: "/app"}, time.Minute, io.Discard)
	if err == nil || strings.Contains(err.Error(), "no answer within") || ctx.Err() == nil {
		t.Errorf("caller's deadline: %v", err)
	}
}
