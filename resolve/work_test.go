package resolve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Each strategy's work over the tags (parsing, sorting) stops with a
// *StoppedError naming the step when no caller waits any more, or when its context
// ends.
func TestStrategiesStopWhenNobodyWaits(t *testing.T) {
	tags := make([]string, 5000)
	for i := range tags {
		tags[i] = fmt.Sprintf("%d", i)
	}
	gone, leave := context.WithCancelCause(context.Background())
	leave(errors.New("render timeout"))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctxs := map[string]struct {
		ctx context.Context
		is  error
	}{
		"waiter gone":       {WithWaiter(context.Background(), gone), ErrNoWaiter},
		"context cancelled": {cancelled, context.Canceled},
	}
	cases := []struct {
		name string
		o    orderer
		step string
	}{
		{"semver", semverStrategy{}, "parsing semantic versions"},
		{"numeric", numeric{}, "parsing integers"},
		{"alphabetical", alphabetical{}, "sorting tags"},
	}
	for _, c := range cases {
		for how, x := range ctxs {
			t.Run(c.name+"/"+how, func(t *testing.T) {
				_, _, err := c.o.order(x.ctx, tags, nil)
				var se *StoppedError
				if !errors.As(err, &se) || !errors.Is(err, x.is) || !strings.Contains(err.Error(), c.step) {
					t.Fatalf("got %v, want a StoppedError of %q that is %v", err, c.step, x.is)
				}
			})
		}
	}
}

// sortStopping sorts while the work goes on, and stops a sort under way.
func TestSortStopping(t *testing.T) {
	x := []int{3, 1, 2}
	if err := sortStopping(context.Background(), "sorting", x, func(a, b int) int { return a - b }); err != nil || x[0] != 1 || x[2] != 3 {
		t.Fatalf("sorted %v, %v", x, err)
	}
	big := make([]int, 200_000)
	for i := range big {
		big[i] = len(big) - i
	}
	w, leave := context.WithCancel(context.Background())
	n := 0
	err := sortStopping(WithWaiter(context.Background(), w), "sorting", big, func(a, b int) int {
		if n++; n == 5000 {
			leave()
		}
		return a - b
	})
	if !errors.Is(err, ErrNoWaiter) {
		t.Fatalf("a sort whose waiter left: %v, want ErrNoWaiter", err)
	}
	if n > 5000+1024 {
		t.Errorf("%d comparisons made, want at most 1024 after the waiter left", n)
	}
}

// A regular expression too big in itself is refused when the policy is read,
// naming the field, the value, its size and what is accepted.
func TestFilterSizeBounds(t *testing.T) {
	long := "regexp:^(" + strings.Repeat("a|", 520) + "b)$"
	cases := []struct {
		name   string
		allow  string
		ignore string
		errHas []string // empty: accepted
	}{
		{name: "semver expression", allow: `regexp:^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`},
		{name: "1 KiB of alternatives", allow: "regexp:^(" + strings.Repeat("ab|", 338) + "c)$"},
		{name: "source over 1 KiB", allow: long, errHas: []string{"allow-tags", "1045 bytes", "at most 1024 bytes"}},
		{name: "program over 2000 instructions", allow: `regexp:[a-z0-9]{1,1000}x{100}`,
			errHas: []string{"allow-tags", "[a-z0-9]{1,1000}", "compiles to 2", "at most 2000 instructions"}},
		{name: "ignore-tags program too", ignore: `regexp:(ab){1000}`, errHas: []string{"ignore-tags", "instructions"}},
		{name: "syntax error", allow: `regexp:(`, errHas: []string{"allow-tags", "missing closing )"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.allow != "" {
				_, err = ParseAllowTags(c.allow)
			} else {
				_, err = ParseIgnoreTags(c.ignore)
			}
			if len(c.errHas) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want an InputError", err)
			}
			for _, part := range c.errHas {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
		})
	}
}
