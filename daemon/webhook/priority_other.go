//go:build !linux

package webhook

// lowerPriority is Linux's alone: elsewhere the listener keeps the daemon's
// priority.
func lowerPriority(int, bool) error { return nil }
