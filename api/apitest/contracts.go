// Package apitest checks HTTP traffic and events against Bookstore's machine-readable
// contracts (package api): every request a test sends to a service and every response it
// gets against the service's OpenAPI document (kin-openapi's openapi3filter), and every
// event against the CloudEvents spec (the CloudEvents Go SDK) and the JSON Schema of its
// type's data (santhosh-tekuri/jsonschema). A handler, a relay or a test that drifts from
// a document fails a test.
//
// testenv uses it: a service a test starts has its traffic validated (Watch), and the
// events tests publish or capture are validated (ValidateEvent).
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"

	apidocs "github.com/bookstore-go/bookstore/api"
)

// SchemaBase is the $id prefix of every schema in api/schemas.
const SchemaBase = "https://github.com/bookstore-go/bookstore/blob/main/api/schemas/"

// Contracts are the loaded documents.
type Contracts struct {
	// Docs are the OpenAPI documents by service, loaded and validated.
	Docs map[string]*openapi3.T
	// Envelope is the compiled schema of the CloudEvents envelope.
	Envelope *jsonschema.Schema
	// Data are the compiled schemas of each event type's data, by type.
	Data map[string]*jsonschema.Schema
}

var (
	loadOnce sync.Once
	loaded   *Contracts
	loadErr  error
)

// Load loads and validates every document once; later calls return the same result.
func Load() (*Contracts, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

// MustLoad is Load for code that cannot go on without the contracts.
func MustLoad() *Contracts {
	c, err := Load()
	if err != nil {
		panic("apitest: " + err.Error())
	}
	return c
}

func init() {
	// Formats kin-openapi asserts when it validates a value; the documents use these.
	openapi3.DefineStringFormatCallback("uuid", func(s string) error {
		_, err := uuid.Parse(s)
		return err
	})
	openapi3.DefineStringFormatCallback("date-time", func(s string) error {
		_, err := time.Parse(time.RFC3339Nano, s)
		return err
	})
}

func load() (*Contracts, error) {
	c := &Contracts{Docs: map[string]*openapi3.T{}, Data: map[string]*jsonschema.Schema{}}
	for _, svc := range apidocs.Services {
		doc, err := LoadOpenAPI(apidocs.OpenAPI(svc))
		if err != nil {
			return nil, fmt.Errorf("openapi/%s.yaml: %w", svc, err)
		}
		c.Docs[svc] = doc
	}
	comp, names, err := SchemaCompiler()
	if err != nil {
		return nil, err
	}
	if c.Envelope, err = comp.Compile(SchemaBase + "cloudevent.json"); err != nil {
		return nil, fmt.Errorf("schemas/cloudevent.json: %w", err)
	}
	for _, name := range names {
		typ := strings.TrimSuffix(name, ".json")
		if typ == "cloudevent" || typ == "line" {
			continue
		}
		if c.Data[typ], err = comp.Compile(SchemaBase + name); err != nil {
			return nil, fmt.Errorf("schemas/%s: %w", name, err)
		}
	}
	return c, nil
}

// LoadOpenAPI loads an OpenAPI document and validates it as kin-openapi does, formats
// included.
func LoadOpenAPI(b []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background(), openapi3.EnableSchemaFormatValidation(), openapi3.EnableExamplesValidation()); err != nil {
		return nil, err
	}
	return doc, nil
}

// SchemaCompiler returns a JSON Schema compiler (2020-12 by default, formats asserted)
// holding every schema of api/schemas under its $id, and the schemas' file names.
func SchemaCompiler() (*jsonschema.Compiler, []string, error) {
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat()
	entries, err := fs.ReadDir(apidocs.Files(), "schemas")
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, e := range entries {
		b, err := fs.ReadFile(apidocs.Files(), "schemas/"+e.Name())
		if err != nil {
			return nil, nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, nil, fmt.Errorf("schemas/%s: %w", e.Name(), err)
		}
		if id, _ := doc.(map[string]any)["$id"].(string); id != SchemaBase+e.Name() {
			return nil, nil, fmt.Errorf("schemas/%s: $id %q, want %q", e.Name(), id, SchemaBase+e.Name())
		}
		if err := comp.AddResource(SchemaBase+e.Name(), doc); err != nil {
			return nil, nil, err
		}
		names = append(names, e.Name())
	}
	return comp, names, nil
}

// jsonValue decodes b for jsonschema, numbers kept exact.
func jsonValue(b []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

var _ = json.Valid
