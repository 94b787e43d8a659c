package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// envUserPass is env:VAR: user:password in an environment variable, read at each
// fetch.
func envUserPass(v string) fetchFunc {
	return func(context.Context) (*material, error) {
		val, ok := os.LookupEnv(v)
		if !ok || val == "" {
			return nil, fmt.Errorf("environment variable %s is not set", v)
		}
		ac, err := parseUserPass([]byte(val))
		if err != nil {
			return nil, fmt.Errorf("environment variable %s: %w", v, err)
		}
		return &material{lookup: single(ac), what: "user " + ac.Username}, nil
	}
}

// githubToken is github[:VAR]: a token (GITHUB_TOKEN by default) for ghcr.io, with
// GITHUB_ACTOR as the user name when set, as go-containerregistry's GitHub
// keychain does.
func githubToken(v string) fetchFunc {
	return func(context.Context) (*material, error) {
		tok := os.Getenv(v)
		if tok == "" {
			return nil, fmt.Errorf("environment variable %s is not set", v)
		}
		user := os.Getenv("GITHUB_ACTOR")
		if user == "" {
			user = "unset"
		}
		return &material{lookup: single(authn.AuthConfig{Username: user, Password: tok}), what: "token"}, nil
	}
}

// maxScriptOutput bounds what an ext: script may print.
const maxScriptOutput = 64 << 10

// extScript is ext:/path: runs the script (with IMAGE_RESOLVER_REGISTRY set to the
// entry's prefix) and reads user:password from its stdout. Its errors never
// contain what the script printed: stdout may hold a secret, and so may stderr.
func extScript(path string, timeout time.Duration, registry string) fetchFunc {
	return func(ctx context.Context) (*material, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, path)
		cmd.Env = append(os.Environ(), "IMAGE_RESOLVER_REGISTRY="+registry)
		var stdout limitedBuffer
		cmd.Stdout = &stdout
		cmd.Stderr = io.Discard
		cmd.Stdin = nil
		// Kill the whole process group on timeout, and stop waiting for pipes a
		// grandchild still holds.
		setProcessGroup(cmd)
		cmd.WaitDelay = 2 * time.Second
		start := time.Now()
		err := cmd.Run()
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("script timed out after %s (credentialsTimeout)", timeout)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("script stopped: %w", ctx.Err())
		case err != nil:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return nil, fmt.Errorf("script failed: %s after %s (its output is not shown: it may hold a secret)",
					ee.ProcessState.String(), time.Since(start).Round(time.Millisecond))
			}
			return nil, fmt.Errorf("script could not run: %w", err)
		case stdout.over:
			return nil, fmt.Errorf("script printed more than %d bytes; want one user:password line", maxScriptOutput)
		}
		ac, err := parseUserPass(stdout.Bytes())
		if err != nil {
			return nil, fmt.Errorf("script output: %w", err)
		}
		return &material{lookup: single(ac), what: "user " + ac.Username}, nil
	}
}

// limitedBuffer keeps at most maxScriptOutput bytes and notes whether more came.
// (It does not embed bytes.Buffer: io.Copy would use its ReadFrom, unbounded.)
type limitedBuffer struct {
	buf  bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxScriptOutput - b.buf.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte { return b.buf.Bytes() }
