package forgetest

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// testdata holds the recorded answers (testdata/README.md says what they are).
//
//go:embed testdata/*.json
var testdata embed.FS

// sample is one recorded answer: its documentation page, status, headers,
// and JSON answer (or text).
type sample struct {
	Source  string            `json:"source"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Answer  json.RawMessage   `json:"answer"`
	Text    string            `json:"text"`
}

// load reads sample name (without .json); a missing or broken sample is a
// bug of this package, so it panics.
func load(name string) sample {
	data, err := testdata.ReadFile("testdata/" + name + ".json")
	if err != nil {
		panic(fmt.Sprintf("forgetest: sample %s: %v", name, err))
	}
	var s sample
	if err := json.Unmarshal(data, &s); err != nil {
		panic(fmt.Sprintf("forgetest: sample %s: %v", name, err))
	}
	if s.Source == "" || !strings.HasPrefix(s.Source, "https://docs.") {
		panic(fmt.Sprintf("forgetest: sample %s: no documentation source", name))
	}
	return s
}

// object is a fresh copy of the sample's answer, a JSON object.
func (s sample) object() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(s.Answer, &m); err != nil {
		panic(fmt.Sprintf("forgetest: sample from %s is not an object: %v", s.Source, err))
	}
	return m
}

// merged is the sample's answer with more's fields added (a list item and
// what a single answer adds to it).
func (s sample) merged(more sample) map[string]any {
	m := s.object()
	for k, v := range more.object() {
		m[k] = v
	}
	return m
}

// Failure is an answer a server gives instead of the real one: a refusal
// the client must map (status, headers, body).
type Failure struct {
	Status int
	Header http.Header
	Body   []byte
}

// failure is the refusal a sample records, with more headers.
func failure(s sample, status int, header map[string]string) Failure {
	f := Failure{Status: s.Status, Header: http.Header{}, Body: s.Answer}
	if status != 0 {
		f.Status = status
	}
	for k, v := range s.Headers {
		f.Header.Set(k, v)
	}
	for k, v := range header {
		f.Header.Set(k, v)
	}
	if s.Text != "" {
		f.Body = []byte(s.Text)
		f.Header.Set("Content-Type", "text/plain")
	} else {
		f.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	return f
}

func (f Failure) write(w http.ResponseWriter) {
	for k, vs := range f.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(f.Status)
	w.Write(f.Body)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
