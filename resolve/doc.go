// Package resolve is the kernel: given an image repository and a policy, it finds
// the newest tag that matches the policy and exists for every platform required,
// and says why (which candidates were skipped, and for what).
//
// What is here, by concern:
//
//   - References and policies (reference.go, policy.go, filters.go, platform.go):
//     image references as written, the policy grammar (strategies, constraints,
//     allow/ignore filters, platforms) parsed strictly into a Policy; PolicySpec is
//     its plain-data form, which crosses the daemon's socket.
//   - Strategies, one file each (semver.go, newestbuild.go, digest.go,
//     alphabetical.go, numeric.go): each orders the candidates best first rather
//     than naming one winner, so that the platform check may walk down the order.
//   - The Resolver (resolver.go, inspect*.go, batch.go): walks the candidates,
//     reads only the metadata it needs, concurrently and by digest, and answers
//     batches (ResolveBatch), grouping identical requests: the one place requests
//     are deduplicated. A resolution sees every candidate it needs or fails; it
//     never picks among partial data.
//   - The registry client (Remote, remote*.go over go-containerregistry) behind the
//     small Registry interface, which the cache package wraps; registries entries
//     (registries.go: endpoints, TLS, page sizes, which apps may use them) and
//     credential sources (auth.go; keychains in resolve/credentials).
//   - Its transport (retry.go, bounds.go and the rest of the round trippers):
//     bounded answers in bytes, pages, tags and time, retries honouring
//     Retry-After, and the per-registry rate limits and concurrency governor.
//   - Errors (errors.go) of known kinds, InputError, NoTagError, RegistryError,
//     that survive a trip over the socket (Answer.Err), and redaction of
//     credentials from anything shown (redact.go).
//
// resolve imports none of the project's other packages; everything else imports
// it. resolve/registrytest is a real registry over HTTP for tests.
package resolve
