package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// garNotification is a message Artifact Registry publishes on the gcr topic:
// digest and tag are whole references ("host/project/repo/image@sha256:..."
// and "host/project/repo/image:tag").
type garNotification struct {
	Action string `json:"action"`
	Digest string `json:"digest"`
	Tag    string `json:"tag"`
}

// parseGAR reads Artifact Registry's notification as a Pub/Sub push delivers it:
// wrapped in the push envelope ({"message":{"data":<base64>,"messageId":...},
// "subscription":...}), or unwrapped (the notification itself, its message id
// in X-Goog-Pubsub-Message-Id when the subscription writes metadata). INSERT is
// a push; DELETE is not.
func parseGAR(h http.Header, body []byte) ([]item, error) {
	var p struct {
		Message *struct {
			Data          string `json:"data"`
			MessageID     string `json:"messageId"`
			LegacyMessage string `json:"message_id"`
		} `json:"message"`
		garNotification
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	n, id := p.garNotification, h.Get("X-Goog-Pubsub-Message-Id")
	switch m := p.Message; {
	case m != nil:
		if m.Data == "" {
			return nil, errors.New("no message.data")
		}
		data, err := base64.StdEncoding.DecodeString(m.Data)
		if err != nil {
			return nil, errors.New("message.data is not base64")
		}
		n = garNotification{}
		if err := decodeObject(data, &n); err != nil {
			return nil, fmt.Errorf("message.data: %w", err)
		}
		id = firstNonEmpty(m.MessageID, m.LegacyMessage)
	case n.Action == "":
		return nil, errors.New("neither a Pub/Sub push envelope nor an Artifact Registry notification")
	}
	it, err := garItem(id, n)
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

func garItem(id string, n garNotification) (item, error) {
	switch {
	case n.Action == "":
		return item{}, errors.New("no action")
	case n.Action != "INSERT":
		return ignoredItem(id, "action %s", quote(n.Action)), nil
	case n.Digest == "" && n.Tag == "":
		return item{}, errors.New("no digest or tag")
	}
	var host, repo, tag, digest string
	if n.Digest != "" {
		h, r, _, d, err := splitReference(n.Digest)
		if err != nil || d == "" {
			return item{}, fmt.Errorf("digest %s is not a host/repository@digest reference", quote(n.Digest))
		}
		host, repo, digest = h, r, d
	}
	if n.Tag != "" {
		h, r, t, _, err := splitReference(n.Tag)
		if err != nil || t == "" {
			return item{}, fmt.Errorf("tag %s is not a host/repository:tag reference", quote(n.Tag))
		}
		if repo != "" && (h != host || r != repo) {
			return item{}, fmt.Errorf("tag %s and digest %s name different repositories", quote(n.Tag), quote(n.Digest))
		}
		host, repo, tag = h, r, t
	}
	return pushItem(id, host, repo, tag, digest)
}

var (
	awsAccount = regexp.MustCompile(`^[0-9]{12}$`)
	awsRegion  = regexp.MustCompile(`^[a-z]{2}(?:-[a-z]+)+-[0-9]+$`)
)

// parseECR reads an EventBridge event as an API destination delivers it: an ECR
// Image Action of action-type PUSH and result SUCCESS is a push to
// <account>.dkr.ecr.<region>.amazonaws.com; other ECR events (deletes, failed
// pushes, scans, replications) and events of other sources are not.
func parseECR(_ http.Header, body []byte) ([]item, error) {
	var ev struct {
		ID         string `json:"id"`
		DetailType string `json:"detail-type"`
		Source     string `json:"source"`
		Account    string `json:"account"`
		Region     string `json:"region"`
		Detail     *struct {
			Result         string `json:"result"`
			ActionType     string `json:"action-type"`
			RepositoryName string `json:"repository-name"`
			ImageDigest    string `json:"image-digest"`
			ImageTag       string `json:"image-tag"`
		} `json:"detail"`
	}
	if err := decodeObject(body, &ev); err != nil {
		return nil, err
	}
	switch d := ev.Detail; {
	case ev.ID == "" || ev.DetailType == "" || ev.Source == "":
		return nil, errors.New("not an EventBridge event: no id, detail-type or source")
	case ev.Source != "aws.ecr" || ev.DetailType != "ECR Image Action":
		return []item{ignoredItem(ev.ID, "%s event %s", quote(ev.Source), quote(ev.DetailType))}, nil
	case d == nil:
		return nil, errors.New("no detail")
	case d.ActionType != "PUSH" || d.Result != "SUCCESS":
		return []item{ignoredItem(ev.ID, "action-type %s, result %s", quote(d.ActionType), quote(d.Result))}, nil
	case d.RepositoryName == "":
		return nil, errors.New("no detail.repository-name")
	}
	registry, err := ecrRegistry(ev.Account, ev.Region)
	if err != nil {
		return nil, err
	}
	it, err := pushItem(ev.ID, registry, ev.Detail.RepositoryName, ev.Detail.ImageTag, ev.Detail.ImageDigest)
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

// ecrRegistry is the private registry of an AWS account in a region.
func ecrRegistry(account, region string) (string, error) {
	if !awsAccount.MatchString(account) {
		return "", fmt.Errorf("account %s is not 12 digits", quote(account))
	}
	if !awsRegion.MatchString(region) {
		return "", fmt.Errorf("region %s is not an AWS region", quote(region))
	}
	domain := "amazonaws.com"
	if strings.HasPrefix(region, "cn-") {
		domain = "amazonaws.com.cn"
	}
	return account + ".dkr.ecr." + region + "." + domain, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
