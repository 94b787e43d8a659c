package resolve

import (
	"bytes"
	"reflect"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// inspect decodes an index, a manifest and a config into the few fields it uses
// (indexFields, manifestFields, configFields) rather than go-containerregistry's
// whole types. For every document go-containerregistry's Parse functions accept,
// those fields must be the ones it gives. (A document it refuses for a field
// inspect does not read, e.g. a malformed layer digest, is accepted.)

const (
	decodeDigestA = "sha256:82d36b2697fa3ac0c913768d6fe853ec0fe8bfadbd9dacf46f07a57c0f966611"
	decodeDigestB = "sha256:56cc011d0a9a7c74f55570188a2a6070c52db45e0895509897283b3cb9d04523"
)

var indexDocs = []string{
	`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":402,"digest":"` + decodeDigestA + `","platform":{"architecture":"amd64","os":"linux"},"artifactType":"application/vnd.oci.image.config.v1+json"},{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":402,"digest":"` + decodeDigestB + `","platform":{"architecture":"arm64","os":"linux","variant":"v8"}}]}`,
	` { "manifests" : [ { "digest" : "` + decodeDigestA + `" , "platform" : { "os" : "linux" , "architecture" : "arm" , "variant" : "v7", "os.features": ["a", "b"], "features": [], "os.version": "10.0" } } ] , "annotations" : { "org.opencontainers.image.created" : "2026-01-01T00:00:00Z", "k": "v", "k": "w" } } `,
	`{"manifests":[],"annotations":{}}`,
	`{"manifests":null}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":null}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","Platform":{"os":"linux","architecture":"amd64"}}]}`,
	`{"Manifests":[{"digest":"` + decodeDigestA + `"}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"OS":"windows","os":"linux","architecture":"amd64"}}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"os":"linux","architecture":"amd64"},"platform":{"architecture":"arm64"}}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `"}],"manifests":[{"mediaType":"x"}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"os":"lin\u0075x","architecture":"amd64"}}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"o\u0073":"plan9","architecture":"amd64"}}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"os":"linux","architecture":"amd64","os.features":"x"}}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `","platform":{"os":5,"architecture":"amd64"}}]}`,
	`{"manifests":[{"digest":"sha256:nothex","platform":{"os":"linux","architecture":"amd64"}}]}`,
	`{"manifests":[{"digest":"md5:abcd"}]}`,
	`{"manifests":[{"digest":5}]}`,
	`{"manifests":[{"digest":null}]}`,
	`{"manifests":[{"size":"not a number","urls":5,"data":"!!","digest":"` + decodeDigestA + `"}]}`,
	`{"manifests":[{"digest":"` + decodeDigestA + `"}]} trailing garbage`,
	`{"manifests":[{"digest":"` + decodeDigestA + `"}]`,
	`{"annotations":{"a":"\u00e9","b":"c"}}`,
	`{"annotations":{"a":1}}`,
	`{"annotations":null}`,
	`{"annotations":{"a":"é"}}`,
	`{"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","mediaType":"x"}]}`,
	`{"MANIFESTS":[]}`,
	`{"manifeſts":[{"digest":"` + decodeDigestA + `"}]}`,
	`[1,2,3]`,
	`"a string"`,
	`null`,
	``,
	`   `,
	`{}`,
	`{"x":{"y":[1,{"z":"}]\"["}],"w":-1.5e3,"t":true,"f":false,"n":null},"manifests":[{"digest":"` + decodeDigestB + `"}]}`,
}

var manifestDocs = []string{
	`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":291,"digest":"` + decodeDigestA + `"},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":2076,"digest":"` + decodeDigestB + `"}]}`,
	`{"config":{"digest":"` + decodeDigestA + `"},"annotations":{"org.opencontainers.image.created":"2026-01-01T00:00:00Z"}}`,
	`{"config":{"digest":"` + decodeDigestA + `","Digest":"` + decodeDigestB + `"}}`,
	`{"config":{"digest":"` + decodeDigestA + `"},"config":{"size":3}}`,
	`{"Config":{"digest":"` + decodeDigestA + `"}}`,
	`{"config":null}`,
	`{"config":"x"}`,
	`{"config":{"digest":"sha256:short"}}`,
	`{"config":{"digest":"` + decodeDigestA + `"},"layers":"not an array"}`,
	`{"config":{"digest":"` + decodeDigestA + `"}}{"config":{}}`,
	`{"config":{"digest":"` + decodeDigestA + `"`,
}

var configDocs = []string{
	`{"architecture":"amd64","created":"2026-12-05T14:23:02.786797036Z","history":[{"created":"2026-12-05T14:23:02.786797036Z","created_by":"registrytest"}],"os":"linux","rootfs":{"type":"layers","diff_ids":["` + decodeDigestA + `"]},"config":{}}`,
	`{"architecture":"arm","variant":"v7","os":"linux","created":"2026-01-01T00:00:00+02:00"}`,
	`{"architecture":"arm64","os":"linux"}`,
	`{"created":"not a time","os":"linux"}`,
	`{"created":"2026-01-01T00:00:00Z","created":"2027-01-01T00:00:00Z"}`,
	`{"created":null,"os":"linux"}`,
	`{"created":5}`,
	`{"Created":"2026-01-01T00:00:00Z"}`,
	`{"OS":"linux"}`,
	`{"os":"linux","Architecture":"amd64","architecture":"arm64"}`,
	`{"os":"lin\"ux"}`,
	`{"os":["linux"]}`,
	`{"history":"x","rootfs":5,"config":{"Env":"x"},"os":"linux"}`,
	`{"os":"linux"} {`,
	`{"os":"linux"`,
}

// sameAsGGCR reports how the fields decoded from doc differ from those
// go-containerregistry's Parse functions give, for a document they accept.
func sameAsGGCR(t *testing.T, doc []byte) {
	t.Helper()
	if im, err := v1.ParseIndexManifest(bytes.NewReader(doc)); err == nil {
		got, err := decodeFields[indexFields](doc)
		if err != nil {
			t.Errorf("index %q: refused (%v); go-containerregistry accepts it", doc, err)
		} else if len(got.Manifests) != len(im.Manifests) || !reflect.DeepEqual(got.Annotations, im.Annotations) {
			t.Errorf("index %q:\n got %+v\nwant %+v", doc, got, im)
		} else {
			for i, d := range im.Manifests {
				g := got.Manifests[i]
				if g.MediaType != d.MediaType || g.Digest != d.Digest || !reflect.DeepEqual(g.Platform, d.Platform) {
					t.Errorf("index %q: manifest %d: got %+v, want %+v", doc, i, g, d)
				}
			}
		}
	}
	if m, err := v1.ParseManifest(bytes.NewReader(doc)); err == nil {
		got, err := decodeFields[manifestFields](doc)
		if err != nil || got.Config.Digest != m.Config.Digest || !reflect.DeepEqual(got.Annotations, m.Annotations) {
			t.Errorf("manifest %q:\n got %+v, %v\nwant %+v", doc, got, err, m)
		}
	}
	if c, err := v1.ParseConfigFile(bytes.NewReader(doc)); err == nil {
		got, err := decodeFields[configFields](doc)
		if err != nil || got.OS != c.OS || got.Architecture != c.Architecture || got.Variant != c.Variant || !got.Created.Equal(c.Created.Time) {
			t.Errorf("config %q:\n got %+v, %v\nwant %+v", doc, got, err, c)
		}
	}
}

func TestDecodeFieldsAsGGCR(t *testing.T) {
	for _, docs := range [][]string{indexDocs, manifestDocs, configDocs} {
		for _, doc := range docs {
			sameAsGGCR(t, []byte(doc))
		}
	}
}

func FuzzDecodeFieldsAsGGCR(f *testing.F) {
	for _, docs := range [][]string{indexDocs, manifestDocs, configDocs} {
		for _, doc := range docs {
			f.Add([]byte(doc))
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) { sameAsGGCR(t, doc) })
}
