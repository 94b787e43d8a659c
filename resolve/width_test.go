package resolve

import (
	"context"
	"testing"
	"time"
)

// tokensFree is how many inspections could start now.
func tokensFree(w *inspectWidth) int { return len(w.tokens) }

// The width follows the round trip the tag pages measure: the first page's time
// counts three round trips, a guess taken when the list ends with it and
// replaced by the second page's otherwise (minWidth until then); after that a
// shorter trip narrows the width (the tokens held come back as their
// inspections end), a longer one does not widen it; without a page the width is
// the bound.
func TestInspectWidthFollowsTheRoundTrip(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := start
	newWidth := func(bound int) *inspectWidth {
		w := newInspectWidth(bound)
		w.lastPage, w.now = start, func() time.Time { return clock }
		clock = start
		return w
	}
	after := func(w *inspectWidth, d time.Duration) {
		clock = clock.Add(d)
		w.page()
	}

	cases := []struct {
		name  string
		first time.Duration // the first page's time from the start
		bound int
		want  int
	}{
		{"far: 20 ms round trips", 60 * time.Millisecond, 64, 64},
		{"far, a lower bound", 60 * time.Millisecond, 16, 16},
		{"nearby: loopback", 900 * time.Microsecond, 64, minWidth},
		{"between: 2 ms round trips", 6 * time.Millisecond, 64, 20},
		{"a bound under the minimum", 900 * time.Microsecond, 4, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWidth(c.bound)
			after(w, c.first)
			if first := min(minWidth, c.bound); w.width != first || tokensFree(w) != first {
				t.Errorf("first page after %v, bound %d: width %d (%d tokens); want %d until the list ends or another page comes",
					c.first, c.bound, w.width, tokensFree(w), first)
			}
			w.listed()
			if w.width != c.want || tokensFree(w) != c.want {
				t.Errorf("a list of one page after %v, bound %d: width %d (%d tokens); want %d", c.first, c.bound, w.width, tokensFree(w), c.want)
			}
			w = newWidth(c.bound)
			after(w, c.first)
			after(w, c.first/3)
			w.listed()
			if w.width != c.want || tokensFree(w) != c.want {
				t.Errorf("pages after %v and %v, bound %d: width %d (%d tokens); want %d", c.first, c.first/3, c.bound, w.width, tokensFree(w), c.want)
			}
		})
	}

	t.Run("no page: the bound", func(t *testing.T) {
		w := newWidth(64)
		if !w.acquire(context.Background()) {
			t.Fatal("acquire failed")
		}
		if w.width != 64 || tokensFree(w) != 63 {
			t.Errorf("width %d, %d tokens free after one taken; want 64 and 63", w.width, tokensFree(w))
		}
	})

	t.Run("a shorter trip narrows, a longer one does not widen", func(t *testing.T) {
		w := newWidth(64)
		after(w, 9*time.Millisecond)
		after(w, 3*time.Millisecond) // 30
		held := 0
		for range 30 {
			if !w.acquire(context.Background()) {
				t.Fatal("acquire failed")
			}
			held++
		}
		after(w, 1*time.Millisecond) // 10
		if w.width != 10 || w.debt != 20 {
			t.Fatalf("after a 1 ms page: width %d, debt %d; want 10 and 20 (30 held)", w.width, w.debt)
		}
		for ; held > 0; held-- {
			w.release()
		}
		if tokensFree(w) != 10 || w.debt != 0 {
			t.Errorf("all inspections ended: %d tokens free, debt %d; want 10 and 0", tokensFree(w), w.debt)
		}
		after(w, 50*time.Millisecond)
		if w.width != 10 || tokensFree(w) != 10 {
			t.Errorf("after a 50 ms page: width %d (%d tokens); want 10 still", w.width, tokensFree(w))
		}
		after(w, 100*time.Microsecond)
		if w.width != minWidth || tokensFree(w) != minWidth {
			t.Errorf("after a 100 µs page: width %d (%d tokens); want %d, taken back at once when free", w.width, tokensFree(w), minWidth)
		}
	})

	t.Run("the second page corrects the first page's guess, then only shorter trips count", func(t *testing.T) {
		w := newWidth(64)
		after(w, 3*time.Millisecond) // a client that pinged before: one trip, guessed as three
		if w.width != minWidth || w.turn != time.Millisecond {
			t.Fatalf("after a first page in 3 ms: width %d, trip %v; want %d and 1ms", w.width, w.turn, minWidth)
		}
		after(w, 5*time.Millisecond) // 50
		if w.width != 50 || tokensFree(w) != 50 {
			t.Errorf("after a second page in 5 ms: width %d (%d tokens); want 50", w.width, tokensFree(w))
		}
		after(w, 20*time.Millisecond)
		if w.width != 50 {
			t.Errorf("after a third page in 20 ms: width %d; want 50 still", w.width)
		}
	})

	t.Run("acquire gives up when the resolution ends", func(t *testing.T) {
		w := newWidth(64)
		after(w, 300*time.Microsecond)
		for range minWidth {
			w.acquire(context.Background())
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if w.acquire(ctx) {
			t.Error("acquired a ninth token at width 8 with the context ended; want false")
		}
	})
}
