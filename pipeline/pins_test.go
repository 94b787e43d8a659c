package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

const pinsFile = `pins:
  web:
    image: ghcr.io/org/web
    reference: ghcr.io/org/web:1.2.0
    tag: 1.2.0
`

func TestRenderPinModeUse(t *testing.T) {
	app := strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)
	t.Run("a pinned alias renders from git with no registry access", func(t *testing.T) {
		dir := appDir(t, map[string]string{"app.yaml": app, ".argocd-image-resolver.pins.yaml": pinsFile})
		b := &fakeBatch{answer: resolved("1.4.2", false)}
		out, report, err := New(b, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "use"))
		if err != nil {
			t.Fatal(err)
		}
		if b.calls != 0 {
			t.Errorf("%d registry batches for a pinned alias", b.calls)
		}
		for _, want := range []string{"image: ghcr.io/org/web:1.2.0 # the app", "web=ghcr.io/org/web:1.2.0 (pinned in .argocd-image-resolver.pins.yaml)"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
		if _, ok := report.PinEdit("shop", "apps/shop"); ok {
			t.Error("a render from pins asks for a pin edit")
		}
	})
	t.Run("an alias without a pin resolves live and asks to be pinned", func(t *testing.T) {
		dir := appDir(t, map[string]string{"app.yaml": app})
		b := &fakeBatch{answer: resolved("1.4.2", true)}
		out, report, err := New(b, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "use", "web.pin-digest", "true"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "ghcr.io/org/web:1.4.2@sha256:") {
			t.Errorf("live render:\n%s", out)
		}
		e, ok := report.PinEdit("shop", "apps/shop")
		if !ok || len(e.Pins) != 1 || e.Pins[0].Alias != "web" || e.Pins[0].Tag != "1.4.2" || e.Base["web"] != "" ||
			!strings.HasPrefix(e.Pins[0].Reference, "ghcr.io/org/web:1.4.2@sha256:") || e.File() != "apps/shop/.argocd-image-resolver.pins.yaml" {
			t.Errorf("pin edit %+v, %v", e, ok)
		}
	})
	t.Run("a pins file reached through a symlink out of the app is refused", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "pins.yaml")
		if err := os.WriteFile(outside, []byte(pinsFile), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := appDir(t, map[string]string{"app.yaml": app})
		if err := os.Symlink(outside, filepath.Join(dir, ".argocd-image-resolver.pins.yaml")); err != nil {
			t.Fatal(err)
		}
		_, _, err := New(&fakeBatch{answer: resolved("1.4.2", false)}, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "use"))
		if err == nil || !strings.Contains(err.Error(), "pin-target pins") {
			t.Errorf("err = %v, want a refusal naming the pin target", err)
		}
	})
}

func TestRenderPinModeWrite(t *testing.T) {
	app := strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)
	dir := appDir(t, map[string]string{"app.yaml": app, ".argocd-image-resolver.pins.yaml": pinsFile})
	b := &fakeBatch{answer: resolved("1.4.2", false)}
	out, report, err := New(b, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "write"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "ghcr.io/org/web:1.4.2 # the app") {
		t.Errorf("write renders live:\n%s", out)
	}
	e, ok := report.PinEdit("shop", "")
	if !ok || len(e.Pins) != 1 || e.Pins[0].Reference != "ghcr.io/org/web:1.4.2" || e.Base["web"] != "ghcr.io/org/web:1.2.0" {
		t.Errorf("pin edit %+v, %v: want 1.2.0 -> 1.4.2", e, ok)
	}
	// The same answer as the file: nothing to write.
	b2 := &fakeBatch{answer: resolved("1.2.0", false)}
	_, report, err = New(b2, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "write"))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := report.PinEdit("shop", ""); ok {
		t.Errorf("pin edit %+v when git already holds the answer", e)
	}
}

// slowBatch answers only when ctx ends: a registry that never answers.
type slowBatch struct{}

func (slowBatch) ResolveBatch(ctx context.Context, _ string, reqs []resolve.Request) ([]resolve.Answer, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func TestRenderTimeout(t *testing.T) {
	dir := appDir(t, map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)})
	_, _, err := New(slowBatch{}, Settings{Timeout: 50 * time.Millisecond}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1"))
	if err == nil || !strings.Contains(err.Error(), "did not finish within 50ms (renderTimeout)") || !strings.Contains(err.Error(), "Argo CD will render again") {
		t.Errorf("err = %v", err)
	}
}

const heldWeb = `held:
  web:
    reference: ghcr.io/org/web:1.4.2
    commit: 0123456789abcdef0123456789abcdef01234567
    reason: a person replaced it in git (commit 0123456789ab)
`

// TestRenderHolds: the holds of the app's pins file are in the report; PinEdit
// never asks for a held reference; preview (table, JSON) and the render's stderr
// show the hold, its reason and how to lift it.
func TestRenderHolds(t *testing.T) {
	app := strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)
	render := func(t *testing.T, files map[string]string, tag string, params ...string) *Report {
		t.Helper()
		_, report, err := New(&fakeBatch{answer: resolved(tag, false)}, Settings{}).Render(context.Background(), appDir(t, files),
			envWith(t, append([]string{"image-list", "web=ghcr.io/org/web:~1"}, params...)...))
		if err != nil {
			t.Fatal(err)
		}
		return report
	}
	t.Run("pin-mode write: the held reference is not asked for, a newer one is", func(t *testing.T) {
		files := map[string]string{"app.yaml": app, pin.PinsFile: pinsFile + heldWeb}
		report := render(t, files, "1.4.2", "pin-mode", "write")
		want := pin.Hold{Alias: "web", Reference: "ghcr.io/org/web:1.4.2", Commit: "0123456789abcdef0123456789abcdef01234567", Reason: "a person replaced it in git (commit 0123456789ab)"}
		if len(report.Holds) != 1 || report.Holds["web"] != want {
			t.Errorf("holds %+v", report.Holds)
		}
		if e, ok := report.PinEdit("shop", ""); ok {
			t.Errorf("pin edit of a held reference: %+v", e)
		}
		report = render(t, files, "1.4.3", "pin-mode", "write")
		e, ok := report.PinEdit("shop", "")
		if !ok || e.Pins[0].Reference != "ghcr.io/org/web:1.4.3" || e.DetectHolds {
			t.Errorf("pin edit %+v, %v: want 1.4.3, no detection in pin-mode write", e, ok)
		}
	})
	t.Run("pin-mode use, beside a pin: preview shows the hold", func(t *testing.T) {
		report := render(t, map[string]string{"app.yaml": app, pin.PinsFile: pinsFile + heldWeb}, "1.4.2", "pin-mode", "use")
		var table, notes bytes.Buffer
		if err := report.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		report.WriteNotes(&notes)
		lift := "delete held.web from " + pin.PinsFile + " (a newer reference lifts it by itself)"
		for _, want := range []string{
			"ghcr.io/org/web:1.2.0  pinned in " + pin.PinsFile,
			"held: web ghcr.io/org/web:1.4.2: a person replaced it in git (commit 0123456789ab); not pinned again. To lift: " + lift + "\n",
		} {
			if !strings.Contains(table.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, table.String())
			}
		}
		if want := "argocd-image-resolver: held: web ghcr.io/org/web:1.4.2 is not pinned again: a person replaced it in git (commit 0123456789ab); " + lift + "\n"; !strings.Contains(notes.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, notes.String())
		}
		b, err := json.Marshal(report.View())
		if err != nil {
			t.Fatal(err)
		}
		if want := `"held":[{"alias":"web","reference":"ghcr.io/org/web:1.4.2","commit":"0123456789abcdef0123456789abcdef01234567","reason":"a person replaced it in git (commit 0123456789ab)","lift":"` + lift + `"}]`; !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	})
	t.Run("pin-mode use, an alias without a pin resolved to the held reference", func(t *testing.T) {
		report := render(t, map[string]string{"app.yaml": app, pin.PinsFile: heldWeb}, "1.4.2", "pin-mode", "use")
		if e, ok := report.PinEdit("shop", ""); ok {
			t.Errorf("pin edit of a held reference: %+v", e)
		}
		var table bytes.Buffer
		if err := report.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(table.String(), "; HELD: not pinned (held in "+pin.PinsFile+")") {
			t.Errorf("table:\n%s", table.String())
		}
		report = render(t, map[string]string{"app.yaml": app, pin.PinsFile: heldWeb}, "1.4.3", "pin-mode", "use")
		if e, ok := report.PinEdit("shop", ""); !ok || !e.DetectHolds || e.Pins[0].Reference != "ghcr.io/org/web:1.4.3" {
			t.Errorf("pin edit %+v, %v: want 1.4.3 with detection (pin-mode use)", e, ok)
		}
	})
	t.Run("a bad held entry fails the render, named", func(t *testing.T) {
		dir := appDir(t, map[string]string{"app.yaml": app, pin.PinsFile: "held:\n  web:\n    reference: ghcr.io/org/web\n"})
		_, _, err := New(&fakeBatch{answer: resolved("1.4.2", false)}, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1", "pin-mode", "write"))
		if err == nil || !strings.Contains(err.Error(), "key held.web.reference (line 3)") || !strings.Contains(err.Error(), `invalid reference "ghcr.io/org/web"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("pin-mode off reads no holds", func(t *testing.T) {
		if report := render(t, map[string]string{"app.yaml": app, pin.PinsFile: heldWeb}, "1.4.2"); len(report.Holds) != 0 {
			t.Errorf("holds %+v", report.Holds)
		}
	})
}
