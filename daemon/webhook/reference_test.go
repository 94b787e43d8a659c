package webhook

import (
	"strings"
	"testing"
)

func TestNewEvent(t *testing.T) {
	long := strings.Repeat("a/", 128) + "b"
	for _, c := range []struct {
		name                            string
		registry, repository, tag, dgst string
		want                            Event
		err                             string
	}{
		{name: "plain", registry: "registry.example.com", repository: "team/app", tag: "v1", dgst: appDigest,
			want: Event{Registry: "registry.example.com", Repository: "team/app", Tag: "v1", Digest: appDigest}},
		{name: "host lower-cased", registry: "Registry.Example.COM:5000", repository: "a",
			want: Event{Registry: "registry.example.com:5000", Repository: "a"}},
		{name: "no registry", repository: "a/b", tag: "latest", want: Event{Repository: "a/b", Tag: "latest"}},
		{name: "ipv6", registry: "[::1]:5000", repository: "a", want: Event{Registry: "[::1]:5000", Repository: "a"}},
		{name: "docker hub aliases", registry: "index.docker.io", repository: "nginx",
			want: Event{Registry: "docker.io", Repository: "library/nginx"}},
		{name: "registry-1", registry: "Registry-1.Docker.IO", repository: "acme/app",
			want: Event{Registry: "docker.io", Repository: "acme/app"}},
		{name: "single component elsewhere", registry: "ghcr.io", repository: "nginx",
			want: Event{Registry: "ghcr.io", Repository: "nginx"}},
		{name: "tag that is the digest", repository: "a", tag: appDigest, dgst: appDigest,
			want: Event{Repository: "a", Digest: appDigest}},
		{name: "tag that is a digest, no digest", repository: "a", tag: appDigest, want: Event{Repository: "a", Digest: appDigest}},
		{name: "separators", repository: "a.b/c__d/e--f/g_h", want: Event{Repository: "a.b/c__d/e--f/g_h"}},
		{name: "sha512", repository: "a", dgst: "sha512:" + strings.Repeat("ab", 64), want: Event{Repository: "a", Digest: "sha512:" + strings.Repeat("ab", 64)}},
		{name: "other algorithm", repository: "a", dgst: "blake3:abc", want: Event{Repository: "a", Digest: "blake3:abc"}},
		{name: "no repository", registry: "r.example.com", err: "no repository"},
		{name: "upper-case repository", repository: "Team/App", err: `repository "Team/App" breaks the OCI name grammar`},
		{name: "empty component", repository: "a//b", err: "breaks the OCI name grammar"},
		{name: "leading separator", repository: "-a", err: "breaks the OCI name grammar"},
		{name: "too long", repository: long, err: "longer than 255"},
		{name: "tag too long", repository: "a", tag: strings.Repeat("t", 129), err: "breaks the OCI tag grammar"},
		{name: "tag with a dot first", repository: "a", tag: ".v1", err: "breaks the OCI tag grammar"},
		{name: "tag another digest", repository: "a", tag: appDigest, dgst: ghcrDigest, err: "is a digest other than the digest"},
		{name: "short sha256", repository: "a", dgst: "sha256:7f5b2640fe6fb4f46592dfd3410c4a79dac4f89e4782432e0378abcd1234", err: "is not 64 lower-case hex digits"},
		{name: "upper-case hex", repository: "a", dgst: strings.ToUpper(appDigest[:7]) + appDigest[7:], err: "breaks the OCI digest grammar"},
		{name: "digest without algorithm", repository: "a", dgst: strings.TrimPrefix(appDigest, "sha256:"), err: "breaks the OCI digest grammar"},
		{name: "host with a path", registry: "r.example.com/v2", repository: "a", err: "is not a host[:port]"},
		{name: "host with a scheme", registry: "https://r.example.com", repository: "a", err: "is not a host[:port]"},
		{name: "host with a space", registry: "r example", repository: "a", err: "is not a host[:port]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := newEvent(c.registry, c.repository, c.tag, c.dgst)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestSplitReference(t *testing.T) {
	for _, c := range []struct {
		ref                     string
		host, repo, tag, digest string
		err                     bool
	}{
		{ref: "us-docker.pkg.dev/p/r/i:1.1", host: "us-docker.pkg.dev", repo: "p/r/i", tag: "1.1"},
		{ref: "us-docker.pkg.dev/p/r/i@" + garDigest, host: "us-docker.pkg.dev", repo: "p/r/i", digest: garDigest},
		{ref: "h:5000/p/i:1@" + garDigest, host: "h:5000", repo: "p/i", tag: "1", digest: garDigest},
		{ref: "https://quay.io/a/b", host: "quay.io", repo: "a/b"},
		{ref: "ghcr.io/o/app:", host: "ghcr.io", repo: "o/app"},
		{ref: "quay.io", err: true},
		{ref: "/a/b", err: true},
		{ref: "h/", err: true},
	} {
		t.Run(c.ref, func(t *testing.T) {
			host, repo, tag, digest, err := splitReference(c.ref)
			if c.err {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host != c.host || repo != c.repo || tag != c.tag || digest != c.digest {
				t.Errorf("got %q %q %q %q", host, repo, tag, digest)
			}
		})
	}
}

func TestQuoteCuts(t *testing.T) {
	if got := quote(strings.Repeat("x", 500)); len(got) > 140 || !strings.HasSuffix(got, "...") {
		t.Errorf("quote of 500 bytes: %d bytes %q", len(got), got)
	}
}
