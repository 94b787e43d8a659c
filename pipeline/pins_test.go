package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
