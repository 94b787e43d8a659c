package render

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// validateSchemas checks the values against each chart's values.schema.json, the
// parent's and every subchart's with its own part of the values, as Helm 4's
// ValidateAgainstSchema does and with its messages, but with references confined to
// the schema documents: Helm's loader fetches http(s) references and reads file://
// ones from the sidecar's disk, and a chart must not make a render reach the network
// or a file outside the repository (where a schema's enum could print it back).
func validateSchemas(chrt *chart.Chart, values map[string]any) error {
	var sb strings.Builder
	if chrt.Schema != nil {
		if err := validateSchema(values, chrt.Schema); err != nil {
			fmt.Fprintf(&sb, "%s:\n", chrt.Name())
			sb.WriteString(err.Error())
		}
	}
	for _, sub := range chrt.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subValues, ok := raw.(map[string]any)
		if !ok {
			fmt.Fprintf(&sb, "%s:\ninvalid type for values: expected object (map), got %T\n", sub.Name(), raw)
			continue
		}
		if err := validateSchemas(sub, subValues); err != nil {
			sb.WriteString(err.Error())
		}
	}
	if sb.Len() > 0 {
		return errors.New(sb.String())
	}
	return nil
}

// validateSchema is Helm's ValidateAgainstSingleSchema with confinedSchemaLoader.
func validateSchema(values common.Values, schemaJSON []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unable to validate schema: %s", r)
		}
	}()
	schema, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return err
	}
	compiler := jsonschema.NewCompiler()
	compiler.UseLoader(confinedSchemaLoader{})
	if err := compiler.AddResource("file:///values.schema.json", schema); err != nil {
		return err
	}
	validator, err := compiler.Compile("file:///values.schema.json")
	if err != nil {
		return err
	}
	if err := validator.Validate(values.AsMap()); err != nil {
		msg := strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n")
		return errors.New(msg + "\n")
	}
	return nil
}

// confinedSchemaLoader loads no schema from outside values.schema.json: a urn: reference
// is the permissive schema (as Helm's default URN resolver), anything else is refused.
type confinedSchemaLoader struct{}

func (confinedSchemaLoader) Load(url string) (any, error) {
	if strings.HasPrefix(url, "urn:") {
		return true, nil
	}
	return nil, fmt.Errorf("values.schema.json references %s: the sidecar reads no schema from the network or from outside the chart (accepted: references within values.schema.json, urn: references)", url)
}
