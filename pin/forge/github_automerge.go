package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// enableAutoMergeMutation asks GitHub to merge the pull request once its
// required checks and reviews pass (GraphQL only; REST has no such call).
const enableAutoMergeMutation = `mutation($id: ID!) {
  enablePullRequestAutoMerge(input: {pullRequestId: $id}) {
    pullRequest { number autoMergeRequest { enabledAt } }
  }
}`

// enableAutoMerge enables auto-merge of the pull request with node ID id.
func (g *gitHub) enableAutoMerge(ctx context.Context, repo, id string) error {
	ctx, c := withCall(ctx, KindGitHub, OpAutoMerge, repo)
	if id == "" {
		return c.refuse(errRefused, "the pull request's answer has no node_id")
	}
	payload, err := json.Marshal(map[string]any{"query": enableAutoMergeMutation, "variables": map[string]string{"id": id}})
	if err != nil {
		return fmt.Errorf("forge github: %s of %s: %w", OpAutoMerge, repo, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.graphQL, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("forge github: %s of %s: %w", OpAutoMerge, repo, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := g.http.Do(req)
	if err != nil {
		return c.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.fail(fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	var answer struct {
		Data   map[string]json.RawMessage `json:"data"`
		Errors []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return c.fail(err)
	}
	if len(answer.Errors) > 0 {
		msgs := make([]string, len(answer.Errors))
		for i, e := range answer.Errors {
			msgs[i] = e.Message
		}
		return c.refuse(graphQLCause(answer.Errors[0].Type), "GraphQL: "+strings.Join(msgs, "; "))
	}
	if v := answer.Data["enablePullRequestAutoMerge"]; len(v) == 0 || string(v) == "null" {
		return c.refuse(errRefused, "GraphQL: the answer has no enablePullRequestAutoMerge")
	}
	return nil
}

// graphQLCause maps a GraphQL error's type to the sentinel it means.
func graphQLCause(typ string) error {
	switch typ {
	case "FORBIDDEN":
		return ErrForbidden
	case "NOT_FOUND":
		return ErrNotFound
	case "RATE_LIMITED":
		return ErrRateLimited
	}
	return ErrInvalid // UNPROCESSABLE: auto-merge not allowed, the PR is clean, ...
}
