package srformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The JSON shape of a JSON Schema value is the value itself: the body after
// the framing is JSON text, validated against the schema
// (github.com/santhosh-tekuri/jsonschema, drafts 4 to 2020-12, the draft
// named by $schema, 2020-12 by default) and passed on compacted; a value
// that does not validate is a decode_error at a source and an error at a
// sink. References to other documents ($ref to a URL) are refused: the
// registry's schema must be self-contained.
var english = message.NewPrinter(language.English)

type jsonSchemaCodec struct{ schema *jsonschema.Schema }

const jsonSchemaURL = "kstreamd:///schema.json"

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: only self-contained schemas are supported", url)
}

func compileJSONSchema(text string) (*jsonSchemaCodec, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(jsonSchemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(jsonSchemaURL)
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{schema: s}, nil
}

func (*jsonSchemaCodec) index() []int { return nil }

func (c *jsonSchemaCodec) validate(v []byte) error {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var inst any
	if err := d.Decode(&inst); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("not JSON: data after the value")
	}
	if err := c.schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("does not validate: %s", oneLine(ve))
		}
		return err
	}
	return nil
}

// oneLine is the validation error's first leaf cause, on one line.
func oneLine(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	loc := "/"
	if len(ve.InstanceLocation) > 0 {
		loc = ""
		for _, p := range ve.InstanceLocation {
			loc += "/" + p
		}
	}
	return loc + ": " + ve.ErrorKind.LocalizedString(english)
}

func (c *jsonSchemaCodec) decode(dst, b []byte, _ []int) ([]byte, error) {
	if err := c.validate(b); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, b); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

func (c *jsonSchemaCodec) encode(dst, v []byte) ([]byte, error) {
	if err := c.validate(v); err != nil {
		return dst, err
	}
	return append(dst, v...), nil
}
