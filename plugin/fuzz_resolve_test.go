package plugin_test

// Fuzz targets for what a policy is written in, through resolve's exported API:
// image references, constraints, tag filters and platforms. The seeds are
// testdata/fuzz/<Target>/* at the top of the repository (one input per file) and
// the f.Add calls below; `go test` runs them, `make fuzz` fuzzes each target.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// perInput bounds the time one fuzzed input may take.
const perInput = 2 * time.Second

// addSeeds adds every file of testdata/fuzz/<target> as a seed.
func addSeeds(f *testing.F, target string, more ...string) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "fuzz", target, "*"))
	if err != nil {
		f.Fatal(err)
	}
	if len(files) == 0 {
		f.Fatalf("no seeds in testdata/fuzz/%s", target)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range more {
		f.Add(s)
	}
}

// timed fails t when fn takes longer than perInput.
func timed(t *testing.T, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	if d := time.Since(start); d > perInput {
		t.Fatalf("%s took %s (at most %s)", what, d, perInput)
	}
}

// inputError fails t unless err is an *resolve.InputError.
func inputError(t *testing.T, what string, err error) {
	t.Helper()
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: error is not an *InputError: %T %v", what, err, err)
	}
	if err.Error() == "" {
		t.Fatalf("%s: empty error", what)
	}
}

// FuzzImageReference: an image reference parses to an image whose written form
// parses back to the same image, or to an *InputError; so does an image-list value.
func FuzzImageReference(f *testing.F) {
	addSeeds(f, "FuzzImageReference", "", " nginx", "nginx:", "a@", "A/b", "localhost:5000/a:b@sha256:"+strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, s string) {
		var img resolve.Image
		var err error
		timed(t, "ParseImage", func() { img, err = resolve.ParseImage(s) })
		if err != nil {
			inputError(t, "ParseImage", err)
		} else {
			if img.Written == "" || img.Key() == "" {
				t.Fatalf("ParseImage(%q) = %+v: no repository", s, img)
			}
			again, err := resolve.ParseImage(img.String())
			if err != nil {
				t.Fatalf("ParseImage(%q).String() = %q does not parse: %v", s, img.String(), err)
			}
			if again.Written != img.Written || again.Tag != img.Tag || again.Digest != img.Digest || again.Key() != img.Key() {
				t.Fatalf("round trip of %q: %+v, then %+v", s, img, again)
			}
		}
		var written, constraint string
		timed(t, "ParseImageSpec", func() { _, written, constraint, err = resolve.ParseImageSpec(s) })
		if err != nil {
			inputError(t, "ParseImageSpec", err)
			return
		}
		if written == "" {
			t.Fatalf("ParseImageSpec(%q): no repository", s)
		}
		if whole := strings.TrimSpace(s); written != whole && written+":"+constraint != whole {
			t.Fatalf("ParseImageSpec(%q) = %q, %q: not a split of the value", s, written, constraint)
		}
	})
}

var strategies = []string{"", "semver", "latest", "newest-build", "digest", "alphabetical", "numeric", "name"}

// FuzzConstraint: a constraint compiles, with every strategy, to a policy of that
// strategy, or to an *InputError; compiling is deterministic.
func FuzzConstraint(f *testing.F) {
	addSeeds(f, "FuzzConstraint", "", "~1.2", ">=1.0 <2 || 3.x", "latest", "v1.2.3-rc.1+b", "^0.0.1", "1.2.3 - 2")
	f.Fuzz(func(t *testing.T, constraint string) {
		for _, st := range strategies {
			var p *resolve.Policy
			var err error
			timed(t, "Compile", func() { p, err = resolve.PolicySpec{Strategy: st, Constraint: constraint}.Compile() })
			_, err2 := resolve.PolicySpec{Strategy: st, Constraint: constraint}.Compile()
			if (err == nil) != (err2 == nil) {
				t.Fatalf("strategy %q, constraint %q: compiled once, failed once: %v, %v", st, constraint, err, err2)
			}
			if err != nil {
				inputError(t, "Compile", err)
				continue
			}
			want, _, serr := resolve.ParseStrategy(st)
			if serr != nil {
				t.Fatalf("strategy %q compiled though ParseStrategy refuses it: %v", st, serr)
			}
			if p.Strategy() != want {
				t.Fatalf("strategy %q compiled to %q", st, p.Strategy())
			}
			if p.String() == "" {
				t.Fatalf("policy without a description")
			}
		}
	})
}

// FuzzTagFilters: allow-tags and ignore-tags values parse to matchers, whose
// written form parses back to the same matcher, or to an *InputError.
func FuzzTagFilters(f *testing.F) {
	addSeeds(f, "FuzzTagFilters", "", "any", "regexp:(", "glob:[", "*-rc*, glob:v*", "regexp:a,b")
	tags := []string{"", "latest", "1.2.3", "v1.2.3-rc.1", "a,b", "main-abc123"}
	f.Fuzz(func(t *testing.T, s string) {
		var allow resolve.TagMatcher
		var err error
		timed(t, "ParseAllowTags", func() { allow, err = resolve.ParseAllowTags(s) })
		if err != nil {
			inputError(t, "ParseAllowTags", err)
		} else {
			roundTrip(t, allow, tags, s)
		}
		var ignore []resolve.TagMatcher
		timed(t, "ParseIgnoreTags", func() { ignore, err = resolve.ParseIgnoreTags(s) })
		if err != nil {
			inputError(t, "ParseIgnoreTags", err)
			return
		}
		for _, m := range ignore {
			roundTrip(t, m, tags, s)
		}
	})
}

// roundTrip checks that m's written form parses to a matcher of the same form and
// the same verdicts.
func roundTrip(t *testing.T, m resolve.TagMatcher, tags []string, s string) {
	t.Helper()
	again, err := resolve.ParseAllowTags(m.String())
	if err != nil {
		t.Fatalf("%q parsed to %q, which does not parse: %v", s, m.String(), err)
	}
	if again.String() != m.String() {
		t.Fatalf("%q parsed to %q, then to %q", s, m.String(), again.String())
	}
	for _, tag := range append(tags, s) {
		var a, b bool
		timed(t, "Match", func() { a, b = m.Match(tag), again.Match(tag) })
		if a != b {
			t.Fatalf("%q and its round trip %q disagree on tag %q", m.String(), again.String(), tag)
		}
	}
}

// FuzzPlatforms: a platform list parses to a sorted list without duplicates whose
// written form parses back to the same list, or to an *InputError.
func FuzzPlatforms(f *testing.F) {
	addSeeds(f, "FuzzPlatforms", "", ",", "linux", "linux/arm64/v8", "Linux/amd64", "linux/arm,linux/arm/v7")
	f.Fuzz(func(t *testing.T, s string) {
		var ps []resolve.Platform
		var err error
		timed(t, "ParsePlatforms", func() { ps, err = resolve.ParsePlatforms(s) })
		if err != nil {
			inputError(t, "ParsePlatforms", err)
			return
		}
		strs := resolve.PlatformStrings(ps)
		if !slices.IsSorted(strs) || len(slices.Compact(slices.Clone(strs))) != len(strs) {
			t.Fatalf("ParsePlatforms(%q) = %v: not sorted or not unique", s, strs)
		}
		again, err := resolve.ParsePlatforms(strings.Join(strs, ","))
		if err != nil || !slices.Equal(again, ps) {
			t.Fatalf("ParsePlatforms(%q) = %v, round trip %v, %v", s, strs, resolve.PlatformStrings(again), err)
		}
		for _, p := range ps {
			if p.OS == "" || p.Arch == "" {
				t.Fatalf("ParsePlatforms(%q): incomplete platform %+v", s, p)
			}
		}
	})
}
