package webhook

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func caseName(c sampleCase) string { return c.file + "/" + strings.ReplaceAll(c.via, " ", "-") }

func TestSamplesReachTheSink(t *testing.T) {
	for _, c := range sampleCases {
		t.Run(caseName(c), func(t *testing.T) {
			f := newFixture(t)
			rec := f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, body %q", rec.Code, rec.Body)
			}
			if got := f.sink.got(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("sink got\n%+v\nwant\n%+v", got, c.want)
			}
			want := map[string]float64{}
			if len(c.want) > 0 {
				want[c.kind+"/accepted"] = float64(len(c.want))
			}
			if c.ignored > 0 {
				want[c.kind+"/ignored"] = float64(c.ignored)
			}
			if got := f.counts(); !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
			if info, debug := pushLogLines(f.logs.String()); info != len(c.want) || debug != 0 {
				t.Errorf("webhook push lines: %d at INFO, %d at DEBUG; want %d and 0\n%s", info, debug, len(c.want), f.logs)
			}
		})
	}
}

func TestUnusedRepository(t *testing.T) {
	for _, c := range sampleCases {
		if len(c.want) == 0 {
			continue
		}
		t.Run(caseName(c), func(t *testing.T) {
			f := newFixture(t)
			f.sink.unused[c.want[0].Repository] = true
			rec := f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, body %q", rec.Code, rec.Body)
			}
			want := map[string]float64{c.kind + "/unused": float64(len(c.want))}
			if c.ignored > 0 {
				want[c.kind+"/ignored"] = float64(c.ignored)
			}
			if got := f.counts(); !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
			// A push no app uses is logged at Debug, not Info: on a shared
			// registry it is most pushes.
			if info, debug := pushLogLines(f.logs.String()); info != 0 || debug != len(c.want) {
				t.Errorf("webhook push lines: %d at INFO, %d at DEBUG; want 0 and %d\n%s", info, debug, len(c.want), f.logs)
			}
		})
	}
}

// pushLogLines counts the "webhook push" lines of logs at INFO and at DEBUG.
func pushLogLines(logs string) (info, debug int) {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="webhook push"`) {
			continue
		}
		switch {
		case strings.Contains(line, "level=INFO"):
			info++
		case strings.Contains(line, "level=DEBUG"):
			debug++
		}
	}
	return info, debug
}

func TestWithoutTheSecret(t *testing.T) {
	for _, c := range sampleCases {
		for _, secret := range []string{wrongSecret(c.kind), ""} {
			t.Run(caseName(c)+"/secret="+secret, func(t *testing.T) {
				f := newFixture(t)
				rec := f.serve(newRequest(c.kind, c.via, secret, readSample(t, c.file), c.header))
				if rec.Code != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401; body %q", rec.Code, rec.Body)
				}
				if got := f.sink.got(); len(got) != 0 {
					t.Errorf("sink got %+v", got)
				}
				if got, want := f.counts(), map[string]float64{c.kind + "/unauthorized": 1}; !maps.Equal(got, want) {
					t.Errorf("counts %v, want %v", got, want)
				}
				if f.h.replays.len() != 0 {
					t.Errorf("an unauthenticated delivery was remembered")
				}
			})
		}
	}
}

func TestSecondDeliveryIsAReplay(t *testing.T) {
	for _, c := range sampleCases {
		t.Run(caseName(c), func(t *testing.T) {
			f := newFixture(t)
			body := readSample(t, c.file)
			for i := range 2 {
				rec := f.serve(newRequest(c.kind, c.via, secretOf(c.kind), body, c.header))
				if rec.Code != http.StatusOK {
					t.Fatalf("delivery %d: status %d, body %q", i, rec.Code, rec.Body)
				}
				f.clock.advance(time.Minute)
			}
			events := len(c.want) + c.ignored
			want := map[string]float64{}
			wantSink := c.want
			switch {
			case c.noReplay: // a byte-identical Quay body is a new push of the same tags
				want[c.kind+"/accepted"] = float64(2 * len(c.want))
				wantSink = append(append([]Event(nil), c.want...), c.want...)
			default:
				want[c.kind+"/replay"] = float64(events)
				if len(c.want) > 0 {
					want[c.kind+"/accepted"] = float64(len(c.want))
				}
				if c.ignored > 0 {
					want[c.kind+"/ignored"] = float64(c.ignored)
				}
			}
			if got := f.sink.got(); !reflect.DeepEqual(got, wantSink) {
				t.Errorf("sink got %+v, want %+v", got, wantSink)
			}
			if got := f.counts(); !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
		})
	}
}

func TestReplayWindowEnds(t *testing.T) {
	f := newFixture(t, WithReplayWindow(time.Hour, 100))
	c := sampleCases[1] // dockerhub: remembered by the body's hash
	body := readSample(t, c.file)
	for _, wait := range []time.Duration{0, 59 * time.Minute, time.Hour} {
		f.clock.advance(wait)
		if rec := f.serve(newRequest(c.kind, c.via, secretOf(c.kind), body, c.header)); rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
	want := map[string]float64{"dockerhub/accepted": 2, "dockerhub/replay": 1}
	if got := f.counts(); !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

func TestReplayDetectionOff(t *testing.T) {
	f := newFixture(t, WithReplayWindow(0, 0))
	c := sampleCases[1]
	for range 2 {
		f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header))
	}
	if got, want := f.counts(), map[string]float64{"dockerhub/accepted": 2}; !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

// oversized is a body one byte over the default bound.
func oversized() []byte {
	b := bytes.Repeat([]byte(" "), DefaultMaxBody+1)
	b[0], b[len(b)-1] = '{', '}'
	return b
}

func TestBodyOverTheBound(t *testing.T) {
	body := oversized()
	for _, c := range sampleCases {
		for _, chunked := range []bool{false, true} {
			t.Run(caseName(c)+map[bool]string{false: "/length", true: "/chunked"}[chunked], func(t *testing.T) {
				f := newFixture(t)
				req := newRequest(c.kind, c.via, secretOf(c.kind), body, c.header)
				if chunked { // no Content-Length: the bound is met while reading
					req.ContentLength = -1
					req.Body = io.NopCloser(bytes.NewReader(body))
				}
				rec := f.serve(req)
				if rec.Code != http.StatusRequestEntityTooLarge {
					t.Fatalf("status %d, want 413", rec.Code)
				}
				if got := f.sink.got(); len(got) != 0 {
					t.Errorf("sink got %+v", got)
				}
				if got, want := f.counts(), map[string]float64{c.kind + "/too-large": 1}; !maps.Equal(got, want) {
					t.Errorf("counts %v, want %v", got, want)
				}
			})
		}
	}
}

func TestBodyAtTheBound(t *testing.T) {
	body := []byte(`{"push_data":{"tag":"v1"},"repository":{"repo_name":"acme/app"}}`)
	f := newFixture(t, WithMaxBody(int64(len(body))))
	rec := f.serve(newRequest("dockerhub", viaPathToken, secretOf("dockerhub"), body, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("a body of exactly the bound: status %d, body %q", rec.Code, rec.Body)
	}
	rec = f.serve(newRequest("dockerhub", viaPathToken, secretOf("dockerhub"), append(body, ' '), nil))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body a byte over the bound: status %d", rec.Code)
	}
}

// TestRateLimit: with no waiting, a delivery over the rate is answered 429 at
// once; one without the secret of a kind that proves it in a header is answered
// 401 first and spends no turn.
func TestRateLimit(t *testing.T) {
	f := newFixture(t, WithRate(1, 2), WithMaxWait(0))
	c := sampleCases[1]
	send := func() *httptest.ResponseRecorder {
		return f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header))
	}
	for i := range 2 {
		if rec := send(); rec.Code != http.StatusOK {
			t.Fatalf("request %d within the burst: status %d", i, rec.Code)
		}
	}
	rec := send()
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if rec := f.serve(newRequest(c.kind, c.via, wrongSecret(c.kind), nil, nil)); rec.Code != http.StatusUnauthorized {
		t.Errorf("unauthenticated request over the rate: status %d, want 401", rec.Code)
	}
	f.clock.advance(time.Second)
	if rec := send(); rec.Code != http.StatusOK {
		t.Errorf("after a second: status %d, want 200", rec.Code)
	}
	want := map[string]float64{"dockerhub/accepted": 1, "dockerhub/replay": 2, "dockerhub/rate-limited": 1, "dockerhub/unauthorized": 1}
	if got := f.counts(); !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

// TestUnauthenticatedFloodSpendsNoTurn: a flood without the secret, on a kind
// that proves it in a header, is refused without spending the rate, so the
// sender that has the secret is still served; it is logged once per
// unauthorizedLogEvery, with the count of the refusals not logged, and counted
// whole. A kind that signs its body is read, so held to the rate, first.
func TestUnauthenticatedFloodSpendsNoTurn(t *testing.T) {
	f := newFixture(t, WithRate(1, 2), WithMaxWait(0))
	c := sampleCases[1] // dockerhub, by path token
	for range 100 {
		if rec := f.serve(newRequest(c.kind, c.via, wrongSecret(c.kind), readSample(t, c.file), c.header)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", rec.Code)
		}
	}
	if rec := f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header)); rec.Code != http.StatusOK {
		t.Fatalf("the sender with the secret after the flood: status %d, want 200", rec.Code)
	}
	if got := strings.Count(f.logs.String(), "webhook unauthorized"); got != 1 {
		t.Errorf("%d warnings for 100 refusals within %v, want 1:\n%s", got, unauthorizedLogEvery, f.logs)
	}
	f.clock.advance(unauthorizedLogEvery)
	f.serve(newRequest(c.kind, c.via, wrongSecret(c.kind), nil, nil))
	if !strings.Contains(f.logs.String(), "unlogged_since_last=99") {
		t.Errorf("the next warning does not count the 99 refusals not logged:\n%s", f.logs)
	}

	var signed sampleCase
	for _, sc := range sampleCases {
		if sc.kind == "github" {
			signed = sc
		}
	}
	for i := range 2 {
		if rec := f.serve(newRequest(signed.kind, signed.via, wrongSecret(signed.kind), readSample(t, signed.file), signed.header)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("signed kind, request %d within the burst: status %d, want 401", i, rec.Code)
		}
	}
	if rec := f.serve(newRequest(signed.kind, signed.via, wrongSecret(signed.kind), readSample(t, signed.file), signed.header)); rec.Code != http.StatusTooManyRequests {
		t.Errorf("signed kind over the rate: status %d, want 429 before its body is read", rec.Code)
	}
	want := map[string]float64{"dockerhub/accepted": 1, "dockerhub/unauthorized": 101, "github/unauthorized": 2, "github/rate-limited": 1}
	if got := f.counts(); !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

// waits records a handler's waits for the rate limit; each passes at once (the
// clock stands still, as for deliveries waiting side by side), or, with leave,
// its sender leaves.
type waits struct {
	got   []time.Duration
	leave bool
}

func (w *waits) sleep(_ context.Context, d time.Duration) bool {
	w.got = append(w.got, d)
	return !w.leave
}

// TestRateLimitWaits: deliveries over the rate wait for their turn, up to
// maxWait, and are served; one that would wait longer is answered 429; one whose
// sender leaves while it waits gives its turn back.
func TestRateLimitWaits(t *testing.T) {
	var w waits
	f := newFixture(t, WithRate(1, 2), WithMaxWait(time.Second), withSleep(w.sleep))
	c := sampleCases[1]
	send := func() *httptest.ResponseRecorder {
		return f.serve(newRequest(c.kind, c.via, secretOf(c.kind), readSample(t, c.file), c.header))
	}
	for i := range 2 {
		if rec := send(); rec.Code != http.StatusOK || len(w.got) != 0 {
			t.Fatalf("request %d within the burst: status %d, waits %v", i, rec.Code, w.got)
		}
	}
	if rec := send(); rec.Code != http.StatusOK || !slices.Equal(w.got, []time.Duration{time.Second}) {
		t.Fatalf("a delivery a second from its turn: status %d, waits %v; want 200 after waiting 1s", rec.Code, w.got)
	}
	rec := send()
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" || len(w.got) != 1 {
		t.Fatalf("a delivery two seconds from its turn: status %d, Retry-After %q, waits %v; want 429, 2, no wait",
			rec.Code, rec.Header().Get("Retry-After"), w.got)
	}
	f.clock.advance(time.Second)
	w.leave = true
	if rec := send(); rec.Body.Len() != 0 || len(w.got) != 2 || w.got[1] != time.Second {
		t.Fatalf("a delivery whose sender left: answered %d %q, waits %v; want no answer after a wait of 1s",
			rec.Code, rec.Body, w.got)
	}
	w.leave = false
	if rec := send(); rec.Code != http.StatusOK || len(w.got) != 3 || w.got[2] != time.Second {
		t.Fatalf("after a sender left its turn: status %d, waits %v; want 200 after 1s (its turn given back)", rec.Code, w.got)
	}
	want := map[string]float64{"dockerhub/accepted": 1, "dockerhub/replay": 3, "dockerhub/rate-limited": 2}
	if got := f.counts(); !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

// TestSleep: the handler's wait ends when its time passes, or at once when the
// sender leaves.
func TestSleep(t *testing.T) {
	if !sleep(context.Background(), time.Millisecond) {
		t.Error("a millisecond's sleep did not pass")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sleep(ctx, time.Hour) {
		t.Error("a sleep whose context ended passed")
	}
}

func TestRateLimitOff(t *testing.T) {
	f := newFixture(t, WithRate(0, 0), WithReplayWindow(0, 0))
	for i := range DefaultBurst + 10 {
		rec := f.serve(newRequest("dockerhub", viaPathToken, secretOf("dockerhub"), readSample(t, "dockerhub.json"), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
	}
}

func TestMethods(t *testing.T) {
	f := newFixture(t)
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions} {
		rec := f.serve(httptest.NewRequest(method, "/webhooks/github", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", method, rec.Code)
		}
		if got := rec.Header().Get("Allow"); got != http.MethodPost {
			t.Errorf("%s: Allow %q", method, got)
		}
	}
	if got := f.counts(); len(got) != 0 {
		t.Errorf("counts %v, want none", got)
	}
}

func TestPathsNotServed(t *testing.T) {
	partial, err := NewHandler(Secrets{"github": []byte(secretOf("github"))}, &recordingSink{})
	if err != nil {
		t.Fatal(err)
	}
	full := newFixture(t).h
	for _, c := range []struct {
		name string
		h    *Handler
		path string
	}{
		{"unknown kind", full, "/webhooks/gitlab"},
		{"kind without a secret", partial, "/webhooks/dockerhub"},
		{"token of a kind without a secret", partial, "/webhooks/dockerhub/" + secretOf("dockerhub")},
		{"token on a signing kind", full, "/webhooks/github/" + secretOf("github")},
		{"token on a header kind", full, "/webhooks/harbor/" + secretOf("harbor")},
		{"empty token", full, "/webhooks/dockerhub/"},
		{"deeper path", full, "/webhooks/dockerhub/" + secretOf("dockerhub") + "/more"},
		{"no kind", full, "/webhooks/"},
		{"outside the prefix", full, "/hooks/github"},
		{"kind in other case", full, "/webhooks/GitHub"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader("{}")))
			if rec.Code != http.StatusNotFound {
				t.Errorf("status %d, want 404", rec.Code)
			}
		})
	}
}

func TestEscapedPathToken(t *testing.T) {
	secret := "a/b c?d%e&f-0123456789"
	h, err := NewHandler(Secrets{"quay": []byte(secret)}, &recordingSink{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest("quay", viaPathToken, secret, readSample(t, "quay.json"), nil))
	if rec.Code != http.StatusOK {
		t.Errorf("status %d, body %q", rec.Code, rec.Body)
	}
}

// TestNoSecretInLogsOrAnswers sends every kind good, wrong, missing, oversized,
// invalid and rate-limited deliveries, and finds neither a secret nor a path
// token in any log line or answer.
func TestNoSecretInLogsOrAnswers(t *testing.T) {
	f := newFixture(t, WithRate(1, 3*len(sampleCases)+4), WithMaxWait(0))
	var answers []string
	send := func(req *http.Request) {
		answers = append(answers, f.serve(req).Body.String())
	}
	for _, c := range sampleCases {
		body := readSample(t, c.file)
		send(newRequest(c.kind, c.via, secretOf(c.kind), body, c.header))
		send(newRequest(c.kind, c.via, wrongSecret(c.kind), body, c.header))
		send(newRequest(c.kind, c.via, secretOf(c.kind), []byte(`{"repository":`+"\""+secretOf(c.kind)), c.header))
	}
	send(newRequest("dockerhub", viaPathToken, secretOf("dockerhub"), oversized(), nil))
	send(newRequest("github", viaHubSignature, secretOf("github"), oversized(), nil))
	send(newRequest("harbor", viaRawHeader, secretOf("harbor"), []byte(`{"type":"PUSH_ARTIFACT"}`), nil))
	send(newRequest("quay", viaPathToken, secretOf("quay"), []byte(`{"repository":"Not/Valid","updated_tags":[]}`), nil))
	for range 3 + len(sampleCases) { // refused deliveries of header kinds spent no turn above
		send(newRequest("dockerhub", viaPathToken, secretOf("dockerhub"), nil, nil))
	}
	if !strings.Contains(strings.Join(answers, ""), "rate limited") {
		t.Fatal("the battery never met the rate limit")
	}
	logs := f.logs.String()
	for _, kind := range Kinds() {
		for _, s := range []string{secretOf(kind), wrongSecret(kind)} {
			if strings.Contains(logs, s) {
				t.Errorf("a log line holds %q:\n%s", s, logs)
			}
			for _, a := range answers {
				if strings.Contains(a, s) {
					t.Errorf("an answer holds %q: %q", s, a)
				}
			}
		}
	}
	if strings.Contains(logs, "/webhooks/") {
		t.Errorf("a log line names a path:\n%s", logs)
	}
}

func TestMetricsRegistered(t *testing.T) {
	f := newFixture(t)
	const name = "argocd_image_resolver_webhook_events_total"
	n, err := testutil.GatherAndCount(f.reg, name)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(Kinds()) * len(outcomes); n != want {
		t.Errorf("%d series of %s, want %d (every kind and outcome at 0)", n, name, want)
	}
	// A second handler on the same registry shares the counter.
	h2, err := NewHandler(testSecrets(), &recordingSink{}, WithRegisterer(f.reg))
	if err != nil {
		t.Fatal(err)
	}
	h2.ServeHTTP(httptest.NewRecorder(), newRequest("dockerhub", viaPathToken, "", nil, nil))
	if got := testutil.ToFloat64(f.h.events.WithLabelValues("dockerhub", outcomeUnauthorized)); got != 1 {
		t.Errorf("shared counter %v, want 1", got)
	}
}

func TestNewHandlerRefuses(t *testing.T) {
	sink := &recordingSink{}
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "webhook_events_total", Help: "x"}))
	for _, c := range []struct {
		name    string
		secrets Secrets
		sink    Sink
		opts    []Option
		want    string
	}{
		{"unknown kind", Secrets{"gitlab": []byte(secretOf("gitlab"))}, sink, nil, `unknown kind "gitlab"`},
		{"short secret", Secrets{"quay": []byte("short")}, sink, nil, "quay secret is shorter than 16 bytes"},
		{"empty secret", Secrets{"harbor": nil}, sink, nil, "harbor secret is shorter"},
		{"no sink", testSecrets(), nil, nil, "no sink"},
		{"metric clash", testSecrets(), sink, []Option{WithRegisterer(clash)}, "registering the webhook metrics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewHandler(c.secrets, c.sink, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

func TestTakesPathToken(t *testing.T) {
	want := map[string]bool{"dockerhub": true, "quay": true, "gar": true, "acr": true, "ecr": true, "zot": true}
	for _, k := range Kinds() {
		if got := TakesPathToken(k); got != want[k] {
			t.Errorf("TakesPathToken(%s) = %v", k, got)
		}
	}
	if got := Kinds(); len(got) != 10 {
		t.Errorf("Kinds() = %v, want the 10 kinds", got)
	}
}
