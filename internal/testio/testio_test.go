package testio_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

func TestSyncBufferConcurrent(t *testing.T) {
	var b testio.SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Errorf("got %d bytes, want 800", len(got))
	}
}
