package resolve

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

type govClock struct{ t time.Time }

func (c *govClock) now() time.Time { return c.t }

func (c *govClock) tick() time.Time { c.t = c.t.Add(time.Millisecond); return c.t }

// take acquires n slots that must be free now.
func take(t *testing.T, g *governor, n int) []time.Time {
	t.Helper()
	sent := make([]time.Time, n)
	for i := range sent {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := g.acquire(ctx)
		cancel()
		if err != nil {
			t.Fatalf("slot %d of %d: %v", i+1, n, err)
		}
		sent[i] = s
	}
	return sent
}

func TestGovernorStartsAtTheBoundAndWaits(t *testing.T) {
	clk := &govClock{t: time.Unix(0, 0)}
	g := newGovernor(4, clk.now)
	take(t, g, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fifth request with a bound of 4: %v, want it to wait until its deadline", err)
	}
	got := make(chan error, 1)
	go func() { _, err := g.acquire(context.Background()); got <- err }()
	time.Sleep(10 * time.Millisecond)
	g.release(clk.tick(), signalNone)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if limit, inFlight := g.state(); limit != 4 || inFlight != 4 {
		t.Errorf("limit %d, in flight %d; want 4, 4 (the waiter got the freed slot; a waiter that gave up holds none)", limit, inFlight)
	}
}

func TestGovernorAdapts(t *testing.T) {
	tests := []struct {
		name      string
		run       func(t *testing.T, g *governor, clk *govClock)
		wantLimit int
	}{
		{"a 429 halves", func(t *testing.T, g *governor, clk *govClock) {
			sent := take(t, g, 1)
			clk.tick()
			g.release(sent[0], signalThrottled)
		}, 32},
		{"429s answering requests sent before the cut halve once", func(t *testing.T, g *governor, clk *govClock) {
			sent := take(t, g, 10)
			clk.tick()
			for _, s := range sent {
				g.release(s, signalThrottled)
			}
		}, 32},
		{"429s to requests sent after a cut halve again", func(t *testing.T, g *governor, clk *govClock) {
			for range 3 {
				sent := take(t, g, 1)
				clk.tick()
				g.release(sent[0], signalThrottled)
				clk.tick()
			}
		}, 8},
		{"never below 1", func(t *testing.T, g *governor, clk *govClock) {
			for range 20 {
				sent := take(t, g, 1)
				clk.tick()
				g.release(sent[0], signalThrottled)
				clk.tick()
			}
		}, 1},
		{"one 503 in fifty is noise", func(t *testing.T, g *governor, clk *govClock) {
			for i := range 500 {
				sent := take(t, g, 1)
				clk.tick()
				s := signalNone
				if i%50 == 49 {
					s = signalOverloaded
				}
				g.release(sent[0], s)
			}
		}, 64},
		{"one in ten overloaded halves", func(t *testing.T, g *governor, clk *govClock) {
			for i := range 50 {
				sent := take(t, g, 1)
				clk.tick()
				s := signalNone
				if i%10 == 9 {
					s = signalOverloaded
				}
				g.release(sent[0], s)
			}
		}, 32},
		{"a caller that left says nothing", func(t *testing.T, g *governor, clk *govClock) {
			for range 50 {
				sent := take(t, g, 1)
				clk.tick()
				g.release(sent[0], signalIgnored)
			}
		}, 64},
		{"recovers one slot per window of good answers", func(t *testing.T, g *governor, clk *govClock) {
			sent := take(t, g, 1)
			clk.tick()
			g.release(sent[0], signalThrottled) // 32
			for range 66 {                      // about 32 answers at 32, then 33 at 33
				s := take(t, g, 1)
				clk.tick()
				g.release(s[0], signalNone)
			}
		}, 34},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &govClock{t: time.Unix(0, 0)}
			g := newGovernor(64, clk.now)
			tt.run(t, g, clk)
			if limit, inFlight := g.state(); limit != tt.wantLimit || inFlight != 0 {
				t.Errorf("limit %d, in flight %d; want %d, 0", limit, inFlight, tt.wantLimit)
			}
		})
	}
}

func TestSignalOf(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		ctx    context.Context
		status int
		err    error
		want   signal
	}{
		{live, 200, nil, signalNone},
		{live, 404, nil, signalNone},
		{live, 500, nil, signalNone},
		{live, 429, nil, signalThrottled},
		{live, 503, nil, signalOverloaded},
		{live, 502, nil, signalOverloaded},
		{live, 504, nil, signalOverloaded},
		{live, 0, errors.New("connection refused"), signalOverloaded},
		{gone, 0, context.Canceled, signalIgnored},
	}
	for _, tt := range tests {
		var resp *http.Response
		if tt.err == nil {
			resp = &http.Response{StatusCode: tt.status}
		}
		if got := signalOf(tt.ctx, resp, tt.err); got != tt.want {
			t.Errorf("status %d, err %v: signal %d, want %d", tt.status, tt.err, got, tt.want)
		}
	}
}
