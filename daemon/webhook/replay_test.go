package webhook

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestReplaySet(t *testing.T) {
	t0 := time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC)
	key := func(i int) replayKey { return newReplayKey("k", fmt.Sprint(i)) }
	type step struct {
		key   int
		after time.Duration // since t0
		first bool
	}
	for _, c := range []struct {
		name   string
		window time.Duration
		size   int
		steps  []step
	}{
		{"seen again within the window", time.Hour, 10, []step{{1, 0, true}, {1, 59 * time.Minute, false}}},
		{"seen again after the window", time.Hour, 10, []step{{1, 0, true}, {1, time.Hour, true}, {1, time.Hour + time.Second, false}}},
		{"a replay does not extend the window", time.Hour, 10, []step{{1, 0, true}, {1, 30 * time.Minute, false}, {1, time.Hour, true}}},
		{"the oldest is forgotten when full", time.Hour, 2, []step{{1, 0, true}, {2, 1, true}, {3, 2, true}, {1, 3, true}, {3, 4, false}}},
		{"kinds do not share ids", time.Hour, 10, []step{{1, 0, true}, {2, 0, true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newReplaySet(c.window, c.size)
			for i, st := range c.steps {
				if got := s.first(key(st.key), t0.Add(st.after)); got != st.first {
					t.Fatalf("step %d (key %d at %v): first = %v", i, st.key, st.after, got)
				}
				if s.len() > c.size {
					t.Fatalf("step %d: %d remembered, over %d", i, s.len(), c.size)
				}
			}
		})
	}
	if newReplayKey("github", "x") == newReplayKey("gitea", "x") {
		t.Error("the same id of two kinds is one key")
	}
}

func TestReplaySetConcurrent(t *testing.T) {
	s := newReplaySet(time.Hour, 1000)
	now := time.Now()
	var firsts atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if s.first(newReplayKey("k", fmt.Sprint(i)), now) {
					firsts.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := firsts.Load(); got != 500 {
		t.Errorf("%d deliveries taken as first, want 500", got)
	}
}
