package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
)

// TestWebhookListenerBoundsConnections: the webhook listener serves at most
// webhook.MaxConns connections at once; one more waits, unanswered, until one of
// them closes, and is served then.
func TestWebhookListenerBoundsConnections(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testWebhookListenerBoundsConnections(t) })
	t.Run("listener process", func(t *testing.T) {
		testWebhookListenerBoundsConnections(t, WithWebhookListener(webhookListenerCommand))
	})
}

func testWebhookListenerBoundsConnections(t *testing.T, opts ...Option) {
	d, _ := startDaemon(t, webhookConfig(t), opts...)
	addr := d.WebhookAddr()
	const req = "GET /webhooks/distribution HTTP/1.1\r\nHost: daemon\r\n\r\n"
	ask := func(c net.Conn, within time.Duration) (*http.Response, error) {
		if _, err := c.Write([]byte(req)); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	// Each held connection is answered once, then kept open, idle (keep-alive).
	held := make([]net.Conn, 0, webhook.MaxConns)
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := range webhook.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if resp, err := ask(c, 10*time.Second); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("connection %d: %v, %v; want 405", i, resp, err)
		}
	}
	extra, err := net.Dial("tcp", addr) // the kernel takes it; the daemon does not serve it
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if resp, err := ask(extra, time.Second); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d of %d allowed: answered %v, %v; want no answer", webhook.MaxConns+1, webhook.MaxConns, resp, err)
	}
	held[0].Close()
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("after one connection closed, the waiting one: %v, %v; want 405", resp, err)
	}
	resp.Body.Close()
}

// TestWebhookBurstOverTheRateWaits: deliveries sent at once over the
// listener's rate (20 a second, bursts of 1 here) wait their turn and are all
// served: a registry's burst of pushes is slowed, not refused.
func TestWebhookBurstOverTheRateWaits(t *testing.T) {
	t.Run("in process", func(t *testing.T) {
		testWebhookBurstOverTheRateWaits(t, withWebhookOptions(webhook.WithRate(20, 1)))
	})
	t.Run("listener process", func(t *testing.T) {
		testWebhookBurstOverTheRateWaits(t, WithWebhookListener(webhookListenerCommand),
			withWebhookProcessOptions(webhook.WithProcessLimits(webhook.Limits{Rate: 20, Burst: 1})))
	})
}

func testWebhookBurstOverTheRateWaits(t *testing.T, opts ...Option) {
	d, _ := startDaemon(t, webhookConfig(t), opts...)
	const burst = 5 // the last waits 200ms, within the shipped second
	statuses := make(chan int, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			statuses <- postDistribution(t, d.WebhookAddr(), testHookSecret, "registry.invalid", fmt.Sprintf("unused/r%d", i), "v1")
		})
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("a delivery of the burst: status %d, want 200", s)
		}
	}
	events := func(outcome string) float64 {
		return metricValue(t, d, "argocd_image_resolver_webhook_events_total", map[string]string{"kind": "distribution", "outcome": outcome})
	}
	if events("unused") != burst || events("rate-limited") != 0 {
		t.Errorf("events: unused %v, rate-limited %v; want %d and 0", events("unused"), events("rate-limited"), burst)
	}
}
