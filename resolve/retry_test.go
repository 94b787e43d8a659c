package resolve

import (
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"1", time.Second, true},
		{"120", 2 * time.Minute, true},
		{"Thu, 01 Jan 2026 00:00:05 GMT", 5 * time.Second, true},
		{"Wed, 31 Dec 2025 23:59:00 GMT", 0, true},
		{"soon", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		got, ok := RetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("RetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
