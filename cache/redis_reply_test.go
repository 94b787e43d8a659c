package cache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// hostileRedis is a TCP server speaking RESP as far as go-redis needs to connect
// (HELLO refused as by a Redis before 6, so the client speaks RESP2; PING, AUTH,
// CLIENT, SUBSCRIBE), that answers every other command (the tier's lookups) with
// the header reply, then sends what mode says: "nothing", "trickle" (1 KiB every
// 10ms) or "flood" (as fast as the connection takes, up to 2 GiB).
type hostileRedis struct {
	addr    string
	reply   string
	mode    string
	replies atomic.Int32 // hostile replies sent
	wg      sync.WaitGroup
}

func startHostileRedis(t testing.TB, reply, mode string) *hostileRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileRedis{addr: l.Addr().String(), reply: reply, mode: mode}
	var mu sync.Mutex
	var conns []net.Conn
	h.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			h.wg.Go(func() { h.serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (h *hostileRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var out string
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			out = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			out = "+PONG\r\n"
		case "AUTH", "CLIENT", "SELECT":
			out = "+OK\r\n"
		case "SUBSCRIBE":
			for i, ch := range args[1:] {
				out += fmt.Sprintf("*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1)
			}
		default:
			h.replies.Add(1)
			if _, err := io.WriteString(c, h.reply); err != nil {
				return
			}
			h.send(c)
			return
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// send writes the reply's announced bytes as the mode says, until the client
// closes the connection.
func (h *hostileRedis) send(c net.Conn) {
	switch h.mode {
	case "trickle":
		chunk := bytes.Repeat([]byte{'x'}, 1<<10)
		for range 100_000 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "flood":
		chunk := bytes.Repeat([]byte{'x'}, 1<<20)
		for range 2 << 10 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}
	_, _ = io.Copy(io.Discard, c) // until the client closes it
}

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("not a bulk string: %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// replyOutcome is what a daemon did against a hostile Redis.
type replyOutcome struct {
	Tag, Digest string
	Registry    map[rt.Kind]int
	Refused     float64
	Up          float64
	Elapsed     time.Duration
	Allocated   uint64
	VmHWMKiB    int64
}

// resolveAgainst resolves app through a daemon whose Redis is addr (with a
// command timeout, 0: the fixtures'), against s.
func resolveAgainst(t testing.TB, s *rt.Server, addr string, timeout time.Duration) replyOutcome {
	t.Helper()
	f := newSharedFixture(t, s, addr, RedisOptions{RetryInterval: time.Hour, Timeout: timeout})
	s.ResetCounts()
	var res *resolve.Result
	start := time.Now()
	alloc := allocated(func() { res = f.mustResolve(t, "app", resolve.PolicySpec{}) })
	return replyOutcome{Tag: res.Tag, Digest: res.Digest, Registry: s.Counts(), Refused: redisCount(f, "refused", ""),
		Up: redisCount(f, "up", ""), Elapsed: time.Since(start), Allocated: alloc}
}

// A Redis that announces a reply of 2 GiB (or an aggregate of 2^31 elements) is
// refused before the client allocates it: the lookup goes on from the registry
// (exactly the requests of a daemon without Redis), counted, the tier marked
// down; the process allocates a few MiB, not gigabytes.
func TestRedisReplyOverBoundIsRefused(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	d110 := s.Digest(t, "app", "1.1.0")
	want := map[rt.Kind]int{rt.Ping: 1, rt.Tags: 1, rt.ManifestHead: 1}
	cases := []struct{ name, reply, mode string }{
		{"bulk string of 2 GiB, then nothing", "$2147483648\r\n", "nothing"},
		{"bulk string of 2 GiB, trickling", "$2147483648\r\n", "trickle"},
		{"array of 2^31 elements", "*2147483648\r\n", "nothing"},
		{"map of 2^30 pairs", "%1073741824\r\n", "nothing"},
		{"many arrays of 600,000 elements", "*3\r\n*600000\r\n*600000\r\n", "nothing"},
		{"bulk strings adding up past the bound", "*3\r\n$40000000\r\n" + strings.Repeat("x", 40_000_000) + "\r\n$40000000\r\n", "nothing"},
		{"a length that never ends", "$" + strings.Repeat("9", 30), "nothing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startHostileRedis(t, tc.reply, tc.mode)
			runtime.GC()
			o := resolveAgainst(t, s, h.addr, 0)
			t.Logf("refused in %v (the whole resolution), %.1f MiB allocated", o.Elapsed.Round(time.Millisecond), float64(o.Allocated)/(1<<20))
			if o.Tag != "1.1.0" || o.Digest != d110 {
				t.Errorf("resolved %s@%s, want 1.1.0@%s", o.Tag, o.Digest, d110)
			}
			if !maps.Equal(o.Registry, want) {
				t.Errorf("registry: %v, want %v (a daemon without redis)", o.Registry, want)
			}
			if h.replies.Load() != 1 || o.Refused != 1 || o.Up != 0 {
				t.Errorf("%d hostile replies, %v refused, up %v; want 1, 1 and 0", h.replies.Load(), o.Refused, o.Up)
			}
			if o.Allocated > 600<<20 {
				t.Errorf("%d MiB allocated while refusing the reply", o.Allocated>>20)
			}
			if o.Elapsed > 3*time.Second {
				t.Errorf("resolution took %v", o.Elapsed)
			}
		})
	}
}

const hostileChildEnv = "IMAGE_RESOLVER_TEST_HOSTILE_REDIS"

// The figure the issue names, from outside: a daemon process whose Redis
// announces 2 GiB and floods it stays under 600 MB of resident memory at its
// highest (VmHWM), and resolves from the registry.
func TestRedisReplyOverBoundChildMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	h := startHostileRedis(t, "$2147483648\r\n", "flood")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisReplyOverBoundChild$", "-test.v")
	cmd.Env = append(os.Environ(), hostileChildEnv+"="+h.addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, js, ok := strings.Cut(string(out), "CHILD-RESULT ")
	js, _, _ = strings.Cut(js, "\n")
	var o replyOutcome
	if !ok || json.Unmarshal([]byte(js), &o) != nil {
		t.Fatalf("no result from the child:\n%s", out)
	}
	t.Logf("daemon process against a Redis announcing 2 GiB and flooding it: VmHWM %d MiB, resolved in %v, %.1f MiB allocated by the resolution",
		o.VmHWMKiB>>10, o.Elapsed.Round(time.Millisecond), float64(o.Allocated)/(1<<20))
	if o.VmHWMKiB<<10 > 600e6 {
		t.Errorf("VmHWM %d MiB, want under 600 MB", o.VmHWMKiB>>10)
	}
	if o.Tag != "1.1.0" || o.Refused != 1 {
		t.Errorf("child resolved %q with %v replies refused", o.Tag, o.Refused)
	}
}

// TestRedisReplyOverBoundChild is the daemon side of the test above, run in a
// process of its own.
func TestRedisReplyOverBoundChild(t *testing.T) {
	addr := os.Getenv(hostileChildEnv)
	if addr == "" {
		t.Skip("run by TestRedisReplyOverBoundChildMemory")
	}
	slog.SetDefault(slog.New(slog.DiscardHandler))
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	// the longest command timeout redis.timeout allows: a client without the
	// bound reads the flood that long
	o := resolveAgainst(t, s, addr, 10*time.Second)
	o.VmHWMKiB = vmHWM(t)
	b, _ := json.Marshal(o)
	fmt.Printf("CHILD-RESULT %s\n", b)
}

func vmHWM(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// The scanner follows RESP2 and RESP3 replies fed in any pieces: what Redis
// sends passes, and each header over a bound fails at that header.
func TestRespScanner(t *testing.T) {
	hello := "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n" +
		"$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
	ok := []string{
		"+OK\r\n", "-ERR no\r\n", ":42\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", ",3.14\r\n", "#t\r\n", "(12345678901234567890\r\n",
		"$0\r\n\r\n", "*3\r\n$5\r\nhello\r\n:1600\r\n$0\r\n\r\n", hello,
		">3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$3\r\nkey\r\n", "|1\r\n+ttl\r\n:3600\r\n$2\r\nhi\r\n",
		"=15\r\ntxt:Some string\r\n", "~2\r\n+a\r\n+b\r\n", "!10\r\nERR broken\r\n",
		"*2\r\n$1000000\r\n" + strings.Repeat("v", 1_000_000) + "\r\n:1\r\n" + "$1000000\r\n" + strings.Repeat("w", 1_000_000) + "\r\n",
	}
	bad := []struct{ in, want string }{
		{"$1048577\r\n", "bulk string of 1048577 bytes announced, over the bound of 1048576 bytes (setting redis.maxReply)"},
		{"*2\r\n$600000\r\n" + strings.Repeat("v", 600_000) + "\r\n$600000\r\n", "reply of 1200024 bytes announced"},
		{"*1000001\r\n", "array of 1000001 elements announced, over the bound of 1000000 elements per reply"},
		{"%600000\r\n", "map of 1200000 elements"},
		{"*2\r\n*600000\r\n*600000\r\n", "reply of 1200002 elements"},
		{"|500001\r\n", "attribute of 1000002 elements"},
		{"$?\r\n", "streamed replies are not accepted"},
		{"$-2\r\n", "length -2"},
		{"$" + strings.Repeat("1", 19) + "\r\n", "more than 18 digits"},
		{"+" + strings.Repeat("s", 1<<20), "reply of 1048577 bytes"},
		{"@1\r\n", `type byte '@' is not RESP`},
		{"$5\rx", "not ended by CRLF"},
	}
	for _, step := range []int{1, 7, 1 << 20} {
		for _, in := range ok {
			sc := respScanner{maxBytes: 1 << 20, maxElems: maxReplyElements}
			for p := in; len(p) > 0; {
				k := min(step, len(p))
				if err := sc.feed([]byte(p[:k])); err != nil {
					t.Fatalf("step %d: %.60q: %v", step, in, err)
				}
				p = p[k:]
			}
			if sc.need != 0 || sc.state != respType {
				t.Errorf("step %d: %.60q: reply not complete (need %d, state %d)", step, in, sc.need, sc.state)
			}
		}
		for _, tc := range bad {
			sc := respScanner{maxBytes: 1 << 20, maxElems: maxReplyElements}
			var err error
			for p := tc.in; len(p) > 0 && err == nil; {
				k := min(step, len(p))
				err = sc.feed([]byte(p[:k]))
				p = p[k:]
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("step %d: %.40q: %v, want %q", step, tc.in, err, tc.want)
			}
		}
	}
}
