// Package webhook receives container registries' push webhooks for the daemon.
// A Handler authenticates each delivery, bounds and strictly parses its body,
// drops replays, rate limits the listener, counts outcomes, and hands each push
// it names (registry, repository, tag, digest) to a Sink, which drops the cached
// tag list and re-resolves the apps that use the repository.
//
// The daemon serves the Handler in a process of its own (Process, ServeProcess:
// the program's webhook-listener command) at a lower priority, so that a
// flood of deliveries cannot take the CPU its renders need.
//
// # Endpoints
//
// The daemon serves POST /webhooks/<kind> on its webhook address, and also
// POST /webhooks/<kind>/<secret> for the kinds whose senders can carry a secret
// only in the URL. A kind without a configured secret is not served (404), nor
// is a path token on a kind that takes none. Each secret is at least
// MinSecretLength (16) bytes, e.g. the output of "openssl rand -hex 32". Serve
// the address over TLS: a path token is a secret in a URL, which proxies in
// between may log (this package never logs the path). Configure each registry
// as follows.
//
//   - distribution (CNCF distribution, the registry image): a notifications
//     endpoint with url https://<daemon>/webhooks/distribution and headers
//     {Authorization: [Bearer <secret>]}. Manifest pushes count; blob pushes,
//     pulls, mounts and deletes are ignored. The registry is the event's
//     request.host.
//   - dockerhub (Docker Hub): the repository's webhook URL
//     https://<daemon>/webhooks/dockerhub/<secret> (Docker Hub sets no header
//     and signs nothing). Every delivery is a push to docker.io.
//   - github (GitHub Container Registry): a repository or organization webhook
//     with payload URL https://<daemon>/webhooks/github, content type
//     application/json, the secret as its secret (X-Hub-Signature-256 is
//     checked over the body), and the "Packages" (package) or "Registry
//     packages" (registry_package) events. A published container version is a
//     push to ghcr.io (or the host of its package_url); other actions, package
//     types and events (ping) are ignored.
//   - harbor (Harbor): a project webhook of type http to
//     https://<daemon>/webhooks/harbor whose auth header is the secret (sent
//     verbatim as Authorization) or "Bearer <secret>", for the "Artifact pushed"
//     event, in the Default or the CloudEvents payload format. Each resource is
//     a push to the host of its resource_url.
//   - quay (Quay.io, Red Hat Quay): a repository notification "Push to
//     Repository" of method webhook POST to
//     https://<daemon>/webhooks/quay/<secret>. Each of updated_tags is a push to
//     the host of docker_url.
//   - acr (Azure Container Registry): a webhook with service URI
//     https://<daemon>/webhooks/acr/<secret>, or the plain /webhooks/acr with
//     the custom header "Authorization: Bearer <secret>", for the push action.
//     The registry is the event's request.host.
//   - gar (Google Artifact Registry): a Pub/Sub push subscription to the
//     project's gcr topic with endpoint https://<daemon>/webhooks/gar/<secret>
//     (the envelope wrapped or unwrapped). INSERT is a push; DELETE is ignored.
//     An OIDC token Pub/Sub adds is not checked: the path token is.
//   - ecr (Amazon ECR): an EventBridge rule on source aws.ecr, detail-type "ECR
//     Image Action", with an API destination to https://<daemon>/webhooks/ecr
//     whose connection has API key authorization of name Authorization and
//     value "Bearer <secret>" (or the endpoint /webhooks/ecr/<secret>), and no
//     input transformer. A successful PUSH is a push to
//     <account>.dkr.ecr.<region>.amazonaws.com.
//   - zot (zot's events extension): an http sink with address
//     https://<daemon>/webhooks/zot and credentials {token: <secret>} (sent as
//     "Authorization: Bearer <secret>"), or the address /webhooks/zot/<secret>.
//     An image.updated event is a push; the registry is the host of the
//     extension's source when that is an http(s) URL, else "".
//   - gitea (Gitea, Forgejo): a webhook of type Gitea (or Forgejo) with target
//     URL https://<daemon>/webhooks/gitea, content type application/json, the
//     secret as its secret (X-Gitea-Signature, X-Forgejo-Signature or
//     X-Hub-Signature-256 is checked over the body), and the "Package" event.
//     A created container package is a push to the host of its html_url.
//
// # Answers
//
// 200 once a delivery's pushes are handed to the sink, or when it is valid but
// carries no push, or is a replay: the sender has nothing to retry. 400 for a
// body that is not the kind's payload (the answer says what is wrong), 401
// without a valid secret (the body is not parsed), 404 for a path not served,
// 405 for a method other than POST, 413 for a body over the bound (1 MiB by
// default), 429 with Retry-After over the listener's rate (200 a second, bursts
// of 400, by default; checked before the body is read) once a delivery's turn is
// more than a second off: nearer, it waits for it and is served. A kind whose
// secret comes in a header or the path is checked before the rate, so that a
// delivery without it spends no turn (its 401 is logged at most once per 10
// seconds per kind); one that signs its body (github, gitea) after it.
//
// # Replays
//
// A delivery is remembered for an hour (at most 10,000 of them) by its sender's
// id: X-GitHub-Delivery, X-Gitea-Delivery (X-Forgejo-Delivery), the id of each
// distribution event, ACR's event id, Pub/Sub's messageId, EventBridge's id, the
// CloudEvents id (zot, Harbor's CloudEvents format); else by the SHA-256 of its
// body (Docker Hub, Harbor's Default format). Quay's notification has no id, no
// time and no digest, so a byte-identical body is as often a new push of the
// same tag as a retry: Quay deliveries are never taken for replays. Only
// authenticated deliveries are remembered.
//
// # Metrics
//
// argocd_image_resolver_webhook_events_total{kind,outcome} counts deliveries,
// and each event of a delivery carrying several: accepted and unused (a push
// the sink said some app uses, or none), ignored, replay, invalid, unauthorized,
// too-large, rate-limited.
package webhook
