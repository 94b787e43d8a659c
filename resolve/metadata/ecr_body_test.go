package metadata

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sdkBody is a request body as the AWS SDK (smithy-go) gives one: a reader
// whose WriteTo answers io.EOF, as an error, once it is closed, which the SDK
// does as soon as Do returns. Its WriteTo, which net/http calls after sending
// Content-Length bytes to check for more, waits for that Close, so the race
// seen in CI (the connection closed under the answer being read) always runs
// the way that fails.
type sdkBody struct {
	r      *bytes.Reader
	mu     sync.Mutex
	closed chan struct{}
}

func newSDKBody(s string) *sdkBody {
	return &sdkBody{r: bytes.NewReader([]byte(s)), closed: make(chan struct{})}
}

func (b *sdkBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *sdkBody) WriteTo(w io.Writer) (int64, error) {
	select {
	case <-b.closed:
		return 0, io.EOF
	case <-time.After(2 * time.Second):
		return b.r.WriteTo(w)
	}
}

func (b *sdkBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closed:
	default:
		close(b.closed)
	}
	return nil
}

// TestECRCallReadsTheAnswerAfterTheSDKClosesItsBody: the SDK closing its
// request body once Do returns does not cost the answer being read.
func TestECRCallReadsTheAnswerAfterTheSDKClosesItsBody(t *testing.T) {
	page := strings.Repeat("x", 1<<20) // more than the transport buffers with the headers
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	call := &ecrCall{hc: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}, max: 2 << 20}
	for i := range 3 {
		body := newSDKBody(`{"repositoryName":"team/app"}`)
		req, err := http.NewRequest(http.MethodPost, srv.URL, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(body.r.Len())
		resp, err := call.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = body.Close() // as smithy-go's ClientHandler does
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(got) != len(page) {
			t.Fatalf("request %d: read %d of %d bytes of the answer: %v", i, len(got), len(page), err)
		}
	}
}
