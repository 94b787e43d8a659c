// Package signature finds an image's Sigstore signatures in its registry and
// verifies them against a requirement (resolve.Trust): the resolver's
// resolve.SignatureVerifier.
//
// # Where signatures are looked for
//
// For a candidate digest, in this order, the first signature that satisfies the
// requirement wins:
//
//  1. the OCI 1.1 referrers API (GET /v2/<repo>/referrers/<digest>, through a
//     registry that implements resolve.ReferrersLister): entries whose
//     artifactType is a Sigstore bundle (application/vnd.dev.sigstore.bundle*,
//     cosign v3's layout); Source "referrers";
//  2. when the registry has no referrers API (404, 400, 406, or not an index),
//     the referrers tag schema: the image index at tag sha256-<hex>, read the
//     same way; Source "referrers-tag". That a registry has no referrers API is
//     remembered per registry host for a while, so it costs one 404, not one per
//     candidate;
//  3. cosign's legacy simple signing at tag sha256-<hex>.sig (cosign v2's
//     default); Source "cosign-tag".
//
// When the resolution listed the repository's tags (resolve.Subject.Tags), a
// fallback tag that is not listed is not asked for.
//
// # What is accepted
//
// A bundle counts as a signature of the candidate when it verifies with
// sigstore-go against the trust material and:
//
//   - it is a DSSE envelope of an in-toto statement with predicate type
//     https://sigstore.dev/cosign/sign/v1 (what `cosign sign` writes) whose
//     subject has the candidate's digest, or a message signature over the
//     candidate's digest (the manifest's bytes). Attestations (any other
//     predicate type: SLSA provenance, SBOMs, vulnerability scans) are not
//     signatures and never count;
//   - keyless: its certificate chains to the trusted root's Fulcio CA, has a
//     signed certificate timestamp (unless WithRequireSCT(false)) and a
//     transparency-log entry (unless WithRequireTlog(false); then an RFC 3161
//     timestamp is needed), and its subject alternative name and OIDC issuer
//     satisfy every identity and issuer matcher of the requirement;
//   - key: it verifies with the operator's public key of that name; a
//     transparency-log entry is needed only WithRequireTlog(true).
//
// A legacy .sig signature is converted to a Sigstore bundle (a message signature
// over the payload's sha256, the certificate or the key, and cosign's Rekor
// bundle as a log entry with its inclusion promise) and verified by the same
// sigstore-go code; then its payload's critical.image.docker-manifest-digest
// must be the candidate's digest.
//
// A multi-platform tag is accepted when its own digest (the image index's) is
// signed, as `cosign sign` does by default. A signature on a platform manifest
// only does not count: the tag's digest is what is deployed and pinned.
//
// # Outcome and bounds
//
// Verify returns a *resolve.Verified, or a *resolve.UnverifiedError with a short
// reason ("unsigned", "signed by X (issuer Y), not ...", "signature does not
// verify: ...", "bundle is for another image (sha256:...)", "over the cap of N
// referrers (trust.maxReferrers)"), or another error when the registry could not
// be read (the resolution then fails). Reasons never carry signature material.
// Referrer lists are bounded in entries (Limits.MaxReferrers) and every
// signature manifest, layer and bundle in bytes (Limits.MaxBytes); a malformed
// bundle or certificate is a skip with its reason. Verdicts are cached by
// repository, digest and requirement (and, for a trusted root fetched through
// TUF, TUFRoot, by the root: a new root checks every candidate again): successes for the success TTL, failures
// for the shorter failure TTL, so a signature added later is seen; registry
// errors are not cached.
package signature
