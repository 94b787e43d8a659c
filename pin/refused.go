package pin

import "strings"

// refused says whether a push error is the server refusing the update (a
// protected branch, a pre-receive hook) rather than the network failing.
func refused(err error) bool {
	msg := err.Error()
	for _, s := range []string{"command error on", "unpack error", "pre-receive hook declined", "protected branch", "remote rejected"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// maxServerSaid bounds what is kept of a server's progress messages.
const maxServerSaid = 4 << 10

// serverSaid keeps the first bytes of what a git server sends on its
// progress channel during a push, where a refusal's reason comes (Gitea:
// "error: Not allowed to push to protected branch main").
type serverSaid struct{ b []byte }

func (s *serverSaid) Write(p []byte) (int, error) {
	if room := maxServerSaid - len(s.b); room > 0 {
		s.b = append(s.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// errors is the server's error lines ("error: ..."), joined.
func (s *serverSaid) errors() string {
	var out []string
	for _, l := range strings.Split(string(s.b), "\n") {
		l = strings.TrimPrefix(strings.TrimSpace(l), "remote: ")
		if msg, ok := strings.CutPrefix(l, "error:"); ok && strings.TrimSpace(msg) != "" {
			out = append(out, strings.TrimSpace(msg))
		}
	}
	return strings.Join(out, "; ")
}
