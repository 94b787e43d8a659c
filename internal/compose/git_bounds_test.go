package compose

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// The daemon's writer takes git.maxRepositoryBytes from the configuration: a
// repository whose branch holds more (a 3 MiB incompressible file, a bound of
// 2 MiB) is refused by name, while the same writer writes a small one.
func TestPinWriterTakesMaxRepositoryBytes(t *testing.T) {
	s := gittest.New(t)
	noise := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{7}).Read(noise)
	big := s.Init(t, "big.git", map[string]string{"apps/web/kustomization.yaml": "resources: []\n", "assets/noise.bin": string(noise)})
	small := s.Init(t, "small.git", map[string]string{"apps/web/kustomization.yaml": "resources: []\n"})
	c := config.DefaultConfig()
	if err := c.Set("git.maxRepositoryBytes", "2MiB", "test"); err != nil {
		t.Fatal(err)
	}
	w := NewPinWriter(c, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), pin.WithRetry(1, time.Millisecond))
	target, err := pin.ParseTarget(pin.TargetPins, nil)
	if err != nil {
		t.Fatal(err)
	}
	change := func(url string) []pin.Change {
		return []pin.Change{{RepoURL: url, Edit: pin.Edit{App: "web", Dir: "apps/web", Target: target, Base: map[string]string{"web": ""},
			Pins: []pin.Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.0.0", Tag: "1.0.0"}}}}}
	}
	_, err = w.Write(context.Background(), change(big))
	if !errors.Is(err, pin.ErrRepositoryTooLarge) {
		t.Fatalf("error %v, want ErrRepositoryTooLarge", err)
	}
	for _, want := range []string{big, "2MiB", "git.maxRepositoryBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if res, err := w.Write(context.Background(), change(small)); err != nil || !res.Pushed {
		t.Errorf("the small repository: %+v, %v", res, err)
	}
}
