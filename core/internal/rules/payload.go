package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// PayloadError says why a payload does not satisfy its event type's JSON
// Schema. It prompts the caller to refuse the event (HTTP 422): the
// producer must fix the payload.
type PayloadError struct {
	// Path is the JSON pointer of the failing value ("" for the whole
	// payload, "/pax", "/recipients/2").
	Path string
	Msg  string
}

func (e *PayloadError) Error() string {
	path := e.Path
	if path == "" {
		path = "/"
	}
	return fmt.Sprintf("payload at %s: %s", path, e.Msg)
}

var schemaPrinter = message.NewPrinter(language.English)

func compileSchema(eventType string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	url := "herald:/events/" + eventType + ".json"
	c := jsonschema.NewCompiler()
	c.UseLoader(noRemoteLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		var sve *jsonschema.SchemaValidationError
		var ve *jsonschema.ValidationError
		if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
			leaf := firstLeaf(ve)
			path := jsonPointer(leaf.InstanceLocation)
			if path == "" {
				path = "/"
			}
			return nil, fmt.Errorf("at %s: %s", path, leaf.ErrorKind.LocalizedString(schemaPrinter))
		}
		return nil, err
	}
	return sch, nil
}

// noRemoteLoader refuses to fetch referenced schemas: a payload schema is
// self-contained, and loading rules does no network I/O.
type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s: only self-contained schemas are allowed", url)
}

// ValidatePayload checks payload against the JSON Schema of eventType's
// rule (if it has one). It returns an error wrapping ErrNoRule when the type
// has no rule, and a *PayloadError when the payload is not JSON or does not
// satisfy the schema.
func (rs *RuleSet) ValidatePayload(eventType string, payload json.RawMessage) error {
	ce, err := rs.event(eventType)
	if err != nil {
		return err
	}
	if ce.schema == nil && json.Valid(payload) {
		// Nothing to check but that it is JSON (the relay's hot path).
		return nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &PayloadError{Msg: "not valid JSON: " + err.Error()}
	}
	if ce.schema == nil {
		return nil
	}
	err = ce.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &PayloadError{Msg: err.Error()}
	}
	leaf := firstLeaf(ve)
	return &PayloadError{Path: jsonPointer(leaf.InstanceLocation), Msg: leaf.ErrorKind.LocalizedString(schemaPrinter)}
}

// firstLeaf descends to the first most specific cause.
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}
