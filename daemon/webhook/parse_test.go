package webhook

import (
	"encoding/base64"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// viaOf is how each kind's sender is authenticated in the tables below.
var viaOf = map[string]string{
	"distribution": viaBearer, "github": viaHubSignature, "gitea": viaGiteaSignature, "harbor": viaRawHeader,
	"dockerhub": viaPathToken, "quay": viaPathToken, "acr": viaPathToken, "gar": viaPathToken, "ecr": viaPathToken, "zot": viaPathToken,
}

func pubsub(notification string) string {
	return `{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(notification)) +
		`","messageId":"2070443601311999"},"subscription":"projects/p/subscriptions/s"}`
}

var zotBinary = hdr("Ce-Specversion", "1.0", "Ce-Id", "e-1", "Ce-Source", "zotregistry.dev", "Content-Type", "application/json")

func zotOfType(typ string) http.Header {
	h := zotBinary.Clone()
	h.Set("Ce-Type", typ)
	return h
}

const ignoredManifest = "application/vnd.docker.distribution.manifest.v2+json"

func TestEventsThatAreNotPushes(t *testing.T) {
	for _, c := range []struct {
		name, kind, body string
		header           http.Header
		ignored          int
	}{
		{"distribution pull", "distribution", `{"events":[{"id":"a","action":"pull","target":{"mediaType":"` + ignoredManifest + `","repository":"r","tag":"t"}}]}`, nil, 1},
		{"distribution delete", "distribution", `{"events":[{"id":"a","action":"delete","target":{"digest":"` + appDigest + `","repository":"r"}}]}`, nil, 1},
		{"distribution blob mount and push", "distribution", `{"events":[{"id":"a","action":"mount","target":{"repository":"r"}},{"id":"b","action":"push","target":{"mediaType":"application/octet-stream","repository":"r"}}]}`, nil, 2},
		{"github ping", "github", `{"zen":"Keep it logically awesome.","hook_id":1}`, hdr("X-GitHub-Event", "ping"), 1},
		{"github push event", "github", `{"ref":"refs/heads/main"}`, hdr("X-GitHub-Event", "push"), 1},
		{"github updated", "github", `{"action":"updated","package":{"name":"app","package_type":"CONTAINER"}}`, hdr("X-GitHub-Event", "package"), 1},
		{"github maven", "github", `{"action":"published","registry_package":{"name":"lib","package_type":"maven","ecosystem":"maven"}}`, hdr("X-GitHub-Event", "registry_package"), 1},
		{"harbor pull", "harbor", `{"type":"PULL_ARTIFACT","event_data":{"resources":[{"tag":"1"}],"repository":{"repo_full_name":"p/r"}}}`, nil, 1},
		{"harbor delete", "harbor", `{"type":"DELETE_ARTIFACT","event_data":{}}`, nil, 1},
		{"harbor scan, cloudevents", "harbor", `{"specversion":"1.0","id":"x","type":"harbor.scan.completed","data":{}}`, nil, 1},
		{"quay build", "quay", `{"build_id":"296ec063","repository":"acme/web","docker_tags":["latest"]}`, nil, 1},
		{"acr delete", "acr", `{"id":"d","action":"delete","target":{"repository":"hello-world","digest":"` + acrDigest + `"}}`, nil, 1},
		{"acr chart push", "acr", `{"id":"c","action":"chart_push","target":{"name":"chart","version":"1.0.0"}}`, nil, 1},
		{"acr ping", "acr", `{"id":"p","action":"ping"}`, nil, 1},
		{"gar delete", "gar", pubsub(`{"action":"DELETE","digest":"us-docker.pkg.dev/p/r/i@` + garDigest + `"}`), nil, 1},
		{"ecr delete", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","account":"123456789012","region":"us-west-2","detail":{"action-type":"DELETE","result":"SUCCESS","repository-name":"r"}}`, nil, 1},
		{"ecr failed push", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","account":"123456789012","region":"us-west-2","detail":{"action-type":"PUSH","result":"FAILURE","repository-name":"r"}}`, nil, 1},
		{"ecr scan", "ecr", `{"id":"e","detail-type":"ECR Image Scan","source":"aws.ecr","detail":{}}`, nil, 1},
		{"eventbridge other source", "ecr", `{"id":"e","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{}}`, nil, 1},
		{"zot delete", "zot", `{"name":"r","reference":"t"}`, zotOfType("zotregistry.image.deleted"), 1},
		{"zot repository created", "zot", `{"name":"r"}`, zotOfType("zotregistry.repository.created"), 1},
		{"gitea deleted", "gitea", `{"action":"deleted","package":{"type":"container","name":"web","version":"1","owner":{"login":"o"}}}`, hdr("X-Gitea-Event", "package"), 1},
		{"gitea npm", "gitea", `{"action":"created","package":{"type":"npm","name":"web","version":"1","owner":{"login":"o"}}}`, hdr("X-Gitea-Event", "package"), 1},
		{"gitea push event", "gitea", `{"ref":"refs/heads/main"}`, hdr("X-Gitea-Event", "push"), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			rec := f.serve(newRequest(c.kind, viaOf[c.kind], secretOf(c.kind), []byte(c.body), c.header))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, body %q", rec.Code, rec.Body)
			}
			if got := f.sink.got(); len(got) != 0 {
				t.Errorf("sink got %+v", got)
			}
			if got, want := f.counts(), map[string]float64{c.kind + "/ignored": float64(c.ignored)}; !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
		})
	}
}

func TestMalformedBodies(t *testing.T) {
	type bad struct {
		name, kind, body string
		header           http.Header
		want             string // in the answer, after "invalid <kind> payload: "
	}
	var cases []bad
	for _, k := range Kinds() { // whatever the kind, what is not one JSON object
		h := http.Header(nil)
		if k == "zot" {
			h = zotOfType(zotImageUpdated)
		}
		cases = append(cases,
			bad{"not JSON", k, "push", h, "not a JSON object"},
			bad{"a list", k, "[]", h, "not a JSON object"},
			bad{"null", k, "null", h, "not a JSON object"},
			bad{"cut short", k, `{"a":`, h, "malformed JSON"},
			bad{"two objects", k, "{} {}", h, "data after the object"},
		)
	}
	cases = append(cases, []bad{
		{"distribution no events", "distribution", `{"events":[]}`, nil, "no events"},
		{"distribution events not a list", "distribution", `{"events":{}}`, nil, "events is a JSON object, not a list"},
		{"distribution no action", "distribution", `{"events":[{"id":"a"}]}`, nil, "events[0]: no action"},
		{"distribution no repository", "distribution", `{"events":[{"action":"push","target":{"mediaType":"` + ignoredManifest + `"}}]}`, nil, "events[0]: no target.repository"},
		{"distribution bad tag", "distribution", `{"events":[{"action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"r","tag":"v 1"}}]}`, nil, `tag "v 1" breaks the OCI tag grammar`},
		{"distribution short digest", "distribution", `{"events":[{"action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"r","digest":"sha256:7f5b"}}]}`, nil, "is not 64 lower-case hex digits"},
		{"distribution bad host", "distribution", `{"events":[{"action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"r"},"request":{"host":"a b"}}]}`, nil, "is not a host[:port]"},
		{"dockerhub no repository", "dockerhub", `{"push_data":{"tag":"t"}}`, nil, "no repository"},
		{"dockerhub no push_data", "dockerhub", `{"repository":{"repo_name":"a/b"}}`, nil, "no push_data"},
		{"dockerhub upper case", "dockerhub", `{"push_data":{"tag":"t"},"repository":{"repo_name":"Acme/App"}}`, nil, "breaks the OCI name grammar"},
		{"dockerhub tag a number", "dockerhub", `{"push_data":{"tag":1},"repository":{"repo_name":"a/b"}}`, nil, "push_data.tag is a JSON number, not a string"},
		{"github no package", "github", `{"action":"published"}`, hdr("X-GitHub-Event", "package"), "no package"},
		{"github wrong key", "github", `{"action":"published","registry_package":{}}`, hdr("X-GitHub-Event", "package"), "no package"},
		{"github no action", "github", `{"package":{"package_type":"CONTAINER"}}`, hdr("X-GitHub-Event", "package"), "no action"},
		{"github no owner", "github", `{"action":"published","package":{"name":"app","package_type":"CONTAINER"}}`, nil, "no package.name or package.owner.login"},
		{"github no version", "github", `{"action":"published","package":{"name":"app","package_type":"CONTAINER","owner":{"login":"o"}}}`, nil, "no package.package_version"},
		{"github bad package_url", "github", `{"action":"published","package":{"name":"app","package_type":"CONTAINER","owner":{"login":"o"},"package_version":{"package_url":"app"}}}`, nil, "does not name a registry host"},
		{"harbor no type", "harbor", `{"event_data":{}}`, nil, "no type"},
		{"harbor no event_data", "harbor", `{"type":"PUSH_ARTIFACT"}`, nil, "no event_data"},
		{"harbor no resources", "harbor", `{"type":"PUSH_ARTIFACT","event_data":{"repository":{"repo_full_name":"p/r"}}}`, nil, "no event_data.resources"},
		{"harbor no repository", "harbor", `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1"}]}}`, nil, "no event_data.repository"},
		{"harbor cloudevents no data", "harbor", `{"specversion":"1.0","id":"x","type":"harbor.artifact.pushed"}`, nil, "no data"},
		{"harbor tag other than digest", "harbor", `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"` + harborCE + `","digest":"` + harborDigest + `"}],"repository":{"repo_full_name":"p/r"}}}`, nil, "is a digest other than the digest"},
		{"quay no repository", "quay", `{"updated_tags":["latest"]}`, nil, "no repository"},
		{"quay tags an object", "quay", `{"repository":"a/b","updated_tags":{"latest":"abc"}}`, nil, "updated_tags is a JSON object, not a list"},
		{"quay bad docker_url", "quay", `{"repository":"a/b","docker_url":"quay.io","updated_tags":[]}`, nil, "docker_url"},
		{"acr no action", "acr", `{"id":"a","target":{"repository":"r"}}`, nil, "no action"},
		{"acr no repository", "acr", `{"id":"a","action":"push","target":{}}`, nil, "no target.repository"},
		{"gar data not base64", "gar", `{"message":{"data":"!!!","messageId":"1"}}`, nil, "message.data is not base64"},
		{"gar no data", "gar", `{"message":{"messageId":"1"}}`, nil, "no message.data"},
		{"gar data not JSON", "gar", pubsub("INSERT"), nil, "message.data: the body is not a JSON object"},
		{"gar neither", "gar", `{"subscription":"s"}`, nil, "neither a Pub/Sub push envelope nor an Artifact Registry notification"},
		{"gar no action", "gar", pubsub(`{"digest":"us-docker.pkg.dev/p/r/i@` + garDigest + `"}`), nil, "no action"},
		{"gar no reference", "gar", pubsub(`{"action":"INSERT"}`), nil, "no digest or tag"},
		{"gar digest without digest", "gar", pubsub(`{"action":"INSERT","digest":"us-docker.pkg.dev/p/r/i:1"}`), nil, "is not a host/repository@digest reference"},
		{"gar tag without tag", "gar", pubsub(`{"action":"INSERT","tag":"us-docker.pkg.dev/p/r/i"}`), nil, "is not a host/repository:tag reference"},
		{"gar two repositories", "gar", pubsub(`{"action":"INSERT","digest":"us-docker.pkg.dev/p/r/i@` + garDigest + `","tag":"us-docker.pkg.dev/p/r/j:1"}`), nil, "name different repositories"},
		{"ecr not eventbridge", "ecr", `{"detail":{}}`, nil, "not an EventBridge event"},
		{"ecr no detail", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr"}`, nil, "no detail"},
		{"ecr no repository", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","detail":{"action-type":"PUSH","result":"SUCCESS"}}`, nil, "no detail.repository-name"},
		{"ecr bad account", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","account":"12","region":"us-west-2","detail":{"action-type":"PUSH","result":"SUCCESS","repository-name":"r"}}`, nil, `account "12" is not 12 digits`},
		{"ecr bad region", "ecr", `{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","account":"123456789012","region":"mars","detail":{"action-type":"PUSH","result":"SUCCESS","repository-name":"r"}}`, nil, `region "mars" is not an AWS region`},
		{"zot not a cloudevent", "zot", `{"name":"r"}`, hdr("Content-Type", "application/json"), "not a CloudEvent"},
		{"zot no id", "zot", `{"name":"r"}`, hdr("Ce-Specversion", "1.0", "Ce-Type", zotImageUpdated), "a CloudEvent without id or type"},
		{"zot no name", "zot", `{"reference":"latest"}`, zotOfType(zotImageUpdated), "no data.name"},
		{"zot data not an object", "zot", `{"specversion":"1.0","id":"i","type":"zotregistry.image.updated","data":"x"}`, hdr("Content-Type", "application/cloudevents+json"), "data: the body is not a JSON object"},
		{"zot structured without specversion", "zot", `{"id":"i","type":"zotregistry.image.updated","data":{}}`, hdr("Content-Type", "application/cloudevents+json"), "without specversion"},
		{"gitea no package", "gitea", `{"action":"created"}`, hdr("X-Gitea-Event", "package"), "no package"},
		{"gitea no action", "gitea", `{"package":{"type":"container"}}`, hdr("X-Gitea-Event", "package"), "no action"},
		{"gitea no owner", "gitea", `{"action":"created","package":{"type":"container","name":"web"}}`, hdr("X-Gitea-Event", "package"), "no package.name or package.owner.login"},
	}...)
	for _, c := range cases {
		t.Run(c.kind+"/"+c.name, func(t *testing.T) {
			f := newFixture(t)
			rec := f.serve(newRequest(c.kind, viaOf[c.kind], secretOf(c.kind), []byte(c.body), c.header))
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %q", rec.Code, rec.Body)
			}
			if prefix := "invalid " + c.kind + " payload: "; !strings.HasPrefix(rec.Body.String(), prefix) || !strings.Contains(rec.Body.String(), c.want) {
				t.Errorf("answer %q, want %q then %q", rec.Body, prefix, c.want)
			}
			if got := f.sink.got(); len(got) != 0 {
				t.Errorf("sink got %+v", got)
			}
			if got, want := f.counts(), map[string]float64{c.kind + "/invalid": 1}; !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
			if f.h.replays.len() != 0 {
				t.Errorf("an invalid delivery was remembered")
			}
		})
	}
}

// TestPushVariants covers shapes the samples do not.
func TestPushVariants(t *testing.T) {
	giteaBody := `{"action":"created","package":{"type":"container","name":"web","version":"` + zotDigest + `","owner":{"login":"o"},"html_url":""},"repository":{"html_url":"http://Gitea.Local:3000/o/web"}}`
	for _, c := range []struct {
		name, kind, body string
		header           http.Header
		sign             func(*http.Request, []byte) // instead of viaOf
		want             []Event
	}{
		{"distribution index by digest", "distribution",
			`{"events":[{"id":"i","action":"push","target":{"mediaType":"application/vnd.oci.image.index.v1+json","repository":"a/b","digest":"` + appDigest + `"},"request":{"host":"[::1]:5000"}}]}`, nil, nil,
			[]Event{{Kind: "distribution", Registry: "[::1]:5000", Repository: "a/b", Digest: appDigest}}},
		{"distribution two manifests", "distribution",
			`{"events":[{"id":"1","action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"a","tag":"1"}},{"id":"2","action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"b","tag":"2"}}]}`, nil, nil,
			[]Event{{Kind: "distribution", Repository: "a", Tag: "1"}, {Kind: "distribution", Repository: "b", Tag: "2"}}},
		{"docker hub official image, namespace and name", "dockerhub",
			`{"push_data":{"tag":"1.27"},"repository":{"name":"nginx","namespace":"library"}}`, nil, nil,
			[]Event{{Kind: "dockerhub", Registry: "docker.io", Repository: "library/nginx", Tag: "1.27"}}},
		{"docker hub single name", "dockerhub",
			`{"push_data":{"tag":"1.27"},"repository":{"repo_name":"nginx"}}`, nil, nil,
			[]Event{{Kind: "dockerhub", Registry: "docker.io", Repository: "library/nginx", Tag: "1.27"}}},
		{"github without event header", "github",
			`{"action":"published","registry_package":{"name":"App","ecosystem":"container","owner":{"login":"O"},"package_version":{"name":"` + ghcrDigest + `"}}}`, nil, nil,
			[]Event{{Kind: "github", Registry: "ghcr.io", Repository: "o/app", Digest: ghcrDigest}}},
		{"github enterprise", "github",
			`{"action":"published","package":{"name":"app","package_type":"CONTAINER","owner":{"login":"o"},"package_version":{"package_url":"containers.GHE.example.com/o/app:1","container_metadata":{"tag":{"name":"1"}}}}}`, hdr("X-GitHub-Event", "package"), nil,
			[]Event{{Kind: "github", Registry: "containers.ghe.example.com", Repository: "o/app", Tag: "1"}}},
		{"harbor two resources", "harbor",
			`{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1","resource_url":"h.example.com/p/r:1"},{"tag":"2","resource_url":"h.example.com/p/r:2"}],"repository":{"name":"r","namespace":"p"}}}`, nil, nil,
			[]Event{{Kind: "harbor", Registry: "h.example.com", Repository: "p/r", Tag: "1"}, {Kind: "harbor", Registry: "h.example.com", Repository: "p/r", Tag: "2"}}},
		{"harbor bearer", "harbor", `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1"}],"repository":{"repo_full_name":"p/r"}}}`, nil,
			func(r *http.Request, _ []byte) { r.Header.Set("Authorization", "bearer  "+secretOf("harbor")) },
			[]Event{{Kind: "harbor", Repository: "p/r", Tag: "1"}}},
		{"quay without tags", "quay", `{"repository":"a/b","docker_url":"quay.example.com/a/b","updated_tags":[]}`, nil, nil,
			[]Event{{Kind: "quay", Registry: "quay.example.com", Repository: "a/b"}}},
		{"gar legacy message_id, digest only", "gar",
			`{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(`{"action":"INSERT","digest":"gcr.io/p/i@`+garDigest+`"}`)) + `","message_id":"9"}}`, nil, nil,
			[]Event{{Kind: "gar", Registry: "gcr.io", Repository: "p/i", Digest: garDigest}}},
		{"ecr china, digest only", "ecr",
			`{"id":"e","detail-type":"ECR Image Action","source":"aws.ecr","account":"123456789012","region":"cn-north-1","detail":{"action-type":"PUSH","result":"SUCCESS","repository-name":"r","image-digest":"` + ecrDigest + `"}}`, nil, nil,
			[]Event{{Kind: "ecr", Registry: "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", Repository: "r", Digest: ecrDigest}}},
		{"zot with a type prefix, binary", "zot", `{"name":"a/b","reference":"v1"}`, zotOfType("com.example.registry.image.updated"), nil,
			[]Event{{Kind: "zot", Repository: "a/b", Tag: "v1"}}},
		{"forgejo, digest version, host of the repository", "gitea", giteaBody, hdr("X-Forgejo-Event", "package", "X-Forgejo-Delivery", "d"),
			func(r *http.Request, body []byte) {
				r.Header.Set("X-Forgejo-Signature", hmacHex(secretOf("gitea"), body))
			},
			[]Event{{Kind: "gitea", Registry: "gitea.local:3000", Repository: "o/web", Digest: zotDigest}}},
		{"gitea by X-Hub-Signature-256", "gitea", giteaBody, hdr("X-Gitea-Event", "package"),
			func(r *http.Request, body []byte) {
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secretOf("gitea"), body))
			},
			[]Event{{Kind: "gitea", Registry: "gitea.local:3000", Repository: "o/web", Digest: zotDigest}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			var req *http.Request
			if c.sign == nil {
				req = newRequest(c.kind, viaOf[c.kind], secretOf(c.kind), []byte(c.body), c.header)
			} else {
				req = newRequest(c.kind, viaOf[c.kind], "", []byte(c.body), c.header)
				c.sign(req, []byte(c.body))
			}
			rec := f.serve(req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, body %q", rec.Code, rec.Body)
			}
			if got := f.sink.got(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("sink got\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

// TestSignatureOverTheRawBody: the signature of another body, even one that
// decodes to the same JSON, is refused.
func TestSignatureOverTheRawBody(t *testing.T) {
	f := newFixture(t)
	body := readSample(t, "github.json")
	req := newRequest("github", viaHubSignature, "", append([]byte(" "), body...), hdr("X-GitHub-Event", "package"))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secretOf("github"), body))
	if rec := f.serve(req); rec.Code != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", rec.Code)
	}
	if got := f.sink.got(); len(got) != 0 {
		t.Errorf("sink got %+v", got)
	}
}
