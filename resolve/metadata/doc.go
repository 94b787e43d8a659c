// Package metadata reads registries' own metadata APIs: Docker Hub's tags API
// (NewDockerHub), Harbor's artifacts API (NewHarbor) and Quay's tags API
// (NewQuay), besides Artifact Registry, ACR and ECR. Each client implements
// resolve.MetadataAPI: it lists a repository's tags a page at a time with what
// the API says of each (digest, media type, platforms, push time and, where the
// API gives exactly what the OCI protocol would, the build time).
//
// The clients are strict readers of untrusted answers: every listing is
// bounded (Options.MaxPages, MaxTags, MaxPageBytes), a next page on another host
// or one already read stops it (*LimitError), and an unusable answer is an
// *APIError carrying the API's status and a cleaned excerpt of its body. No
// credential is ever put in an error or a log. The clients do not retry: the
// Transport of Options does, and on any error the resolver falls back to the OCI
// protocol.
package metadata
