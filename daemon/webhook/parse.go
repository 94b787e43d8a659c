package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
)

// item is one event of a delivery as its kind's parser read it.
type item struct {
	ev     Event  // the push (Kind unset): when push
	push   bool   // false: valid, but not a push (counted ignored)
	reason string // why it is not a push, for the debug log
	id     string // the sender's id of the event or delivery; "" for none
}

// parseFunc reads one kind's delivery: its events, at least one, or an error
// naming what is wrong (never the request's secret, which it does not see).
type parseFunc func(h http.Header, body []byte) ([]item, error)

// pushItem validates a push's parts into an item.
func pushItem(id, registry, repository, tag, digest string) (item, error) {
	ev, err := newEvent(registry, repository, tag, digest)
	if err != nil {
		return item{}, err
	}
	return item{ev: ev, push: true, id: id}, nil
}

// ignoredItem is a valid event that is not a push.
func ignoredItem(id, format string, args ...any) item {
	return item{id: id, reason: fmt.Sprintf(format, args...)}
}

// decodeObject decodes body, which must be one JSON object and nothing after
// it, into v. Fields v does not name are skipped; those it names must have its
// types.
func decodeObject(body []byte, v any) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("the body is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %w", jsonError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("malformed JSON: data after the object")
	}
	return nil
}

// jsonError rephrases a type mismatch by the field's path, without the value.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("%s is a JSON %s, not %s", typeErr.Field, typeErr.Value, jsonKind(typeErr.Type))
	}
	return err
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a number"
}
