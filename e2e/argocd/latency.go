package argocde2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// GRPCTimes reads grpc.time_ms from Argo CD's JSON log lines of finished calls (the
// grpc logging interceptor: v2.14 says "finished unary call with code OK" or
// "finished streaming call ..." with a number, v3.6 "finished call" with a string).
func GRPCTimes(lines []string) []time.Duration {
	var ds []time.Duration
	for _, l := range lines {
		i := strings.Index(l, "{")
		if i < 0 {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l[i:]), &m) != nil {
			continue
		}
		if msg, _ := m["msg"].(string); !strings.HasPrefix(msg, "finished") {
			continue
		}
		var ms float64
		switch v := m["grpc.time_ms"].(type) {
		case float64:
			ms = v
		case string:
			if _, err := fmt.Sscanf(v, "%g", &ms); err != nil {
				continue
			}
		default:
			continue
		}
		ds = append(ds, time.Duration(ms*float64(time.Millisecond)))
	}
	return ds
}

// Summary: count, min, median, p90, max.
func Summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d min=%s median=%s p90=%s max=%s", len(s), r(s[0]), r(q(0.5)), r(q(0.9)), r(s[len(s)-1]))
}
