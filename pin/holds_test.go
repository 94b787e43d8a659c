package pin_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

const (
	holdsRepo = "holds.git"
	webPins   = "apps/web/" + pin.PinsFile
	webImage  = "ghcr.io/org/web"
)

// pinsOf is a pins file pinning web to tag.
func pinsOf(tag string) string {
	return "pins:\n  web:\n    image: " + webImage + "\n    reference: " + webImage + ":" + tag + "\n    tag: " + tag + "\n"
}

// holdsFixture is a repository whose app web is pinned (pins file) to 1.2.0 by
// its first commit, and writers committing as Pin Bot.
type holdsFixture struct {
	s   *gittest.Server
	url string
	reg *prometheus.Registry
	log *testio.SyncBuffer
}

func newHoldsFixture(t *testing.T, files map[string]string) *holdsFixture {
	t.Helper()
	s := gittest.New(t)
	if files == nil {
		files = map[string]string{webPins: pinsOf("1.2.0")}
	}
	return &holdsFixture{s: s, url: s.Init(t, holdsRepo, files), reg: prometheus.NewRegistry(), log: &testio.SyncBuffer{}}
}

// writer is a new Writer, as a new process (another replica, a restart) makes.
func (f *holdsFixture) writer(opts ...pin.WriterOption) *pin.Writer {
	base := []pin.WriterOption{
		pin.WithAuthor("Pin Bot", "pinbot@example.com"),
		pin.WithRetry(3, 5*time.Millisecond),
		pin.WithMetrics(f.reg),
		pin.WithLogger(slog.New(slog.NewJSONHandler(f.log, nil))),
	}
	return pin.NewWriter(append(base, opts...)...)
}

// change pins web from old to tag on branch, in pin-mode use (holds detected)
// with target (nil: the pins file).
func (f *holdsFixture) change(branch, old, tag string, target pin.Target) pin.Change {
	if target == nil {
		target, _ = pin.ParseTarget("", nil)
	}
	return pin.Change{RepoURL: f.url, Branch: branch, Edit: pin.Edit{
		App: "web", Dir: "apps/web", Target: target, DetectHolds: true,
		Pins: []pin.Pin{{Alias: "web", Image: webImage, Reference: webImage + ":" + tag, Tag: tag}},
		Base: map[string]string{"web": webImage + ":" + old},
	}}
}

func (f *holdsFixture) write(t *testing.T, w *pin.Writer, c pin.Change) pin.Result {
	t.Helper()
	res, err := w.Write(context.Background(), []pin.Change{c})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// holds reads the holds of web's pins file at branch's tip.
func (f *holdsFixture) holds(t *testing.T, branch string) map[string]pin.Hold {
	t.Helper()
	if !f.s.HasFile(t, holdsRepo, branch, webPins) {
		return map[string]pin.Hold{}
	}
	h, err := pin.ReadHolds([]byte(f.s.File(t, holdsRepo, branch, webPins)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// pinned is the reference web's pins file pins at branch's tip.
func (f *holdsFixture) pinned(t *testing.T, branch string) string {
	t.Helper()
	target, _ := pin.ParseTarget("", nil)
	pins, err := target.Read([]byte(f.s.File(t, holdsRepo, branch, webPins)), map[string]string{"web": webImage})
	if err != nil {
		t.Fatal(err)
	}
	return pins["web"].Reference
}

// TestWriteHoldsAPersonsRevert: the writer pins 1.3.0, a person reverts it; the
// next write of 1.3.0, by a new Writer, reads the revert from the history and
// writes a hold instead of the pin; while held, 1.3.0 is not pinned (no commit);
// a newer reference is pinned and lifts the hold in the same commit.
func TestWriteHoldsAPersonsRevert(t *testing.T) {
	f := newHoldsFixture(t, nil)
	f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil))
	revert := f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "Revert web to 1.2.0")

	// a fresh writer: what it knows of the revert is the history
	res := f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil))
	want := pin.Hold{Alias: "web", Reference: webImage + ":1.3.0", Commit: revert, Reason: "a person replaced it in git (commit " + revert[:12] + ")"}
	if !res.Pushed || len(res.Applied) != 0 || len(res.Conflicts) != 0 || !slices.Equal(res.Held, []pin.Hold{want}) {
		t.Fatalf("result %+v, want a commit of the hold %+v alone", res, want)
	}
	if got := f.pinned(t, "main"); got != webImage+":1.2.0" {
		t.Errorf("web is pinned to %s, want the person's 1.2.0", got)
	}
	if got := f.holds(t, "main"); got["web"] != want || len(got) != 1 {
		t.Errorf("holds %+v", got)
	}
	if got := f.s.Log(t, holdsRepo, "main"); !slices.Equal(got, []string{"argocd-image-resolver: hold web 1.3.0 (web)", "Revert web to 1.2.0", "argocd-image-resolver: web 1.2.0 -> 1.3.0 (web)", "initial"}) {
		t.Errorf("log %q", got)
	}
	body := f.s.Show(t, holdsRepo, "main", "-s", "--format=%B")
	for _, s := range []string{"- web web: " + webImage + ":1.3.0", "reason: " + want.Reason, "file: " + webPins + " (delete held.web to lift the hold)"} {
		if !strings.Contains(body, s) {
			t.Errorf("the hold commit's message lacks %q:\n%s", s, body)
		}
	}

	// held: not pinned, by any writer, and nothing to commit
	for range 2 {
		res = f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil))
		if res.Pushed || len(res.Applied) != 0 || len(res.Held) != 1 || res.Held[0].Reference != want.Reference {
			t.Errorf("a held reference again: %+v", res)
		}
	}
	if n := len(f.s.Log(t, holdsRepo, "main")); n != 4 {
		t.Errorf("%d commits, want 4", n)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_holds_total"); got != 3 {
		t.Errorf("pin_holds_total %v, want 3", got)
	}

	// a newer reference: pinned, and the hold lifted in the same commit
	res = f.write(t, f.writer(), f.change("main", "1.2.0", "1.4.0", nil))
	if !res.Pushed || len(res.Applied) != 1 || len(res.Held) != 0 {
		t.Fatalf("newer reference: %+v", res)
	}
	if got, holds := f.pinned(t, "main"), f.holds(t, "main"); got != webImage+":1.4.0" || len(holds) != 0 {
		t.Errorf("pinned %s, holds %+v; want 1.4.0 and none", got, holds)
	}
	if got := f.s.File(t, holdsRepo, "main", webPins); strings.Contains(got, "held") {
		t.Errorf("held: left in the file:\n%s", got)
	}
	if body := f.s.Show(t, holdsRepo, "main", "-s", "--format=%B"); !strings.Contains(body, "Holds lifted: another reference is pinned\n- web web: "+webImage+":1.3.0") {
		t.Errorf("message:\n%s", body)
	}
	if n := len(f.s.Log(t, holdsRepo, "main")); n != 5 {
		t.Errorf("%d commits, want 5", n)
	}
	f.s.NoForcePush(t, holdsRepo, "main")
	f.s.Fsck(t, holdsRepo)
}

// TestWriteHoldCases: what the history says about a pin about to be written, on
// a repository pinned to 1.2.0 where the writer then pinned 1.3.0.
func TestWriteHoldCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after runs on the branch after the writer's pin of 1.3.0; it returns
		// the reference the branch pins (the base of the next write).
		after  func(t *testing.T, f *holdsFixture) string
		write  string // the tag written next
		detect bool
		held   bool
	}{
		{name: "a person's revert", detect: true, held: true, write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
			return "1.2.0"
		}},
		{name: "a person's edit of our pin to another reference", detect: true, held: true, write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.9")}, "pin web to 1.2.9 by hand")
			return "1.2.9"
		}},
		{name: "without detection (pin-mode write): pinned again", write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
			return "1.2.0"
		}},
		{name: "another reference than ours: pinned", detect: true, write: "1.3.1", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
			return "1.2.0"
		}},
		{name: "our later pin decides: not the one reverted", detect: true, write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
			f.write(t, f.writer(), f.change("main", "1.2.0", "1.2.5", nil))
			return "1.2.5"
		}},
		{name: "a person removed the pin: pinned again", detect: true, write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: "pins: {}\n"}, "unpin web")
			return ""
		}},
		{name: "a person deleted the hold: lifted, pinned again", detect: true, write: "1.3.0", after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
			if res := f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil)); len(res.Held) != 1 || !res.Pushed {
				t.Fatalf("no hold written: %+v", res)
			}
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "lift the hold of web")
			return "1.2.0"
		}},
		{name: "a hold a person wrote is honoured without detection", write: "1.3.0", held: true, after: func(t *testing.T, f *holdsFixture) string {
			f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0") + "held:\n  web:\n    reference: " + webImage + ":1.3.0\n"}, "hold 1.3.0")
			return "1.2.0"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHoldsFixture(t, nil)
			f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil))
			base := tc.after(t, f)
			before := len(f.s.Log(t, holdsRepo, "main"))
			c := f.change("main", base, tc.write, nil)
			if base == "" {
				c.Edit.Base["web"] = ""
			}
			c.Edit.DetectHolds = tc.detect
			res := f.write(t, f.writer(), c)
			pinned := f.pinned(t, "main")
			if tc.held {
				if len(res.Held) != 1 || len(res.Applied) != 0 || pinned == webImage+":"+tc.write {
					t.Errorf("not held: %+v, pinned %s", res, pinned)
				}
				return
			}
			if len(res.Held) != 0 || len(res.Applied) != 1 || pinned != webImage+":"+tc.write || len(f.holds(t, "main")) != 0 {
				t.Errorf("not pinned: %+v, pinned %s, holds %+v", res, pinned, f.holds(t, "main"))
			}
			if n := len(f.s.Log(t, holdsRepo, "main")); n != before+1 {
				t.Errorf("%d commits, want %d", n, before+1)
			}
		})
	}
}

// TestWriteHoldHistoryBound: a revert older than the commits the writer reads
// (WithHoldHistory) is not seen; within them it is.
func TestWriteHoldHistoryBound(t *testing.T) {
	f := newHoldsFixture(t, map[string]string{webPins: pinsOf("1.2.0"), "README.md": "0\n"})
	f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", nil))
	f.s.Commit(t, holdsRepo, "main", map[string]string{webPins: pinsOf("1.2.0")}, "revert")
	for i := range 3 {
		f.s.Commit(t, holdsRepo, "main", map[string]string{"README.md": fmt.Sprintf("%d\n", i+1)}, fmt.Sprintf("readme %d", i+1))
	}
	f.s.Branch(t, holdsRepo, "copy", "main")

	// the revert is the 4th commit from the tip, ours the 5th
	res := f.write(t, f.writer(pin.WithHoldHistory(4)), f.change("main", "1.2.0", "1.3.0", nil))
	if len(res.Held) != 0 || len(res.Applied) != 1 || f.pinned(t, "main") != webImage+":1.3.0" {
		t.Errorf("4 commits read: %+v, pinned %s; want 1.3.0 pinned (our commit not read)", res, f.pinned(t, "main"))
	}
	res = f.write(t, f.writer(pin.WithHoldHistory(5)), f.change("copy", "1.2.0", "1.3.0", nil))
	if len(res.Held) != 1 || len(res.Applied) != 0 || f.pinned(t, "copy") != webImage+":1.2.0" {
		t.Errorf("5 commits read: %+v, pinned %s; want held", res, f.pinned(t, "copy"))
	}
	// none read: only held: entries count
	f.s.Branch(t, holdsRepo, "none", "main~1")
	res = f.write(t, f.writer(pin.WithHoldHistory(0)), f.change("none", "1.2.0", "1.3.0", nil))
	if len(res.Held) != 0 || len(res.Applied) != 1 {
		t.Errorf("no history read: %+v", res)
	}
}

// TestWriteHoldBesideAKustomization: an app whose pins are in its overlay keeps
// its holds in the pins file beside it (created with held: alone), and a newer
// reference lifts it there.
func TestWriteHoldBesideAKustomization(t *testing.T) {
	kust := func(tag string) string {
		return "resources: [deploy.yaml]\nimages:\n  - name: " + webImage + "\n    newTag: " + tag + "\n"
	}
	f := newHoldsFixture(t, map[string]string{"apps/web/kustomization.yaml": kust("1.2.0")})
	target, err := pin.ParseTarget("kustomization", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", target))
	f.s.Commit(t, holdsRepo, "main", map[string]string{"apps/web/kustomization.yaml": kust("1.2.0")}, "revert")

	res := f.write(t, f.writer(), f.change("main", "1.2.0", "1.3.0", target))
	if len(res.Held) != 1 || len(res.Applied) != 0 || !res.Pushed {
		t.Fatalf("%+v", res)
	}
	if got := f.s.File(t, holdsRepo, "main", "apps/web/kustomization.yaml"); got != kust("1.2.0") {
		t.Errorf("kustomization.yaml:\n%s", got)
	}
	if h := f.holds(t, "main"); h["web"].Reference != webImage+":1.3.0" {
		t.Errorf("holds %+v", h)
	}
	if got := f.s.File(t, holdsRepo, "main", webPins); strings.Contains(got, "pins:") || !strings.HasPrefix(got, "# Image references a person rolled back") {
		t.Errorf("pins file:\n%s", got)
	}

	res = f.write(t, f.writer(), f.change("main", "1.2.0", "1.4.0", target))
	if len(res.Applied) != 1 || len(f.holds(t, "main")) != 0 || f.s.File(t, holdsRepo, "main", "apps/web/kustomization.yaml") != kust("1.4.0") {
		t.Errorf("newer: %+v, holds %+v", res, f.holds(t, "main"))
	}
	if got := strings.TrimSpace(f.s.Git(t, holdsRepo, "diff", "--name-only", "main~1", "main")); got != "apps/web/"+pin.PinsFile+"\napps/web/kustomization.yaml" {
		t.Errorf("files of the lifting commit: %q", got)
	}
}
