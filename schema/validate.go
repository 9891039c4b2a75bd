package schema

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaBaseURL is the base of every schema's $id: the schema of message
// name has the id SchemaBaseURL + name + ".json".
const SchemaBaseURL = "https://concord.dev/schema/"

// defsName is the file of shared definitions that the message schemas refer
// to. It is a schema document but not a message.
const defsName = "defs"

// ErrUnknownSchema is returned (wrapped) by Validate for a name that is not
// one of Names.
var ErrUnknownSchema = errors.New("unknown schema")

//go:embed json/*.json
var schemaFS embed.FS

// names lists the message names, sorted, from the embedded files.
var names = func() []string {
	entries, err := fs.ReadDir(schemaFS, "json")
	if err != nil {
		panic(err) // the directory is embedded; it cannot be missing
	}
	var out []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".json")
		if name != defsName {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}()

// Names returns the names of all message schemas, sorted, such as
// "kv.put.request", "lease.grant.reply", "event" and "error". The shared
// definitions ("defs") are not a message and are not listed.
func Names() []string {
	return append([]string(nil), names...)
}

// SchemaID returns the $id of the schema called name:
// SchemaBaseURL + name + ".json".
func SchemaID(name string) string {
	return SchemaBaseURL + name + ".json"
}

// Raw returns the JSON Schema document of a message name, or of "defs" for
// the shared definitions, as embedded; ok is false for an unknown name. The
// slice is a fresh copy the caller may keep or change.
func Raw(name string) (doc []byte, ok bool) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := schemaFS.ReadFile(path.Join("json", name+".json"))
	if err != nil {
		return nil, false
	}
	return b, true
}

var (
	compileOnce sync.Once
	compiled    map[string]*jsonschema.Schema
	compileErr  error
)

// compileAll compiles every embedded schema once. Compiled schemas are
// read-only and safe for concurrent use.
func compileAll() (map[string]*jsonschema.Schema, error) {
	compileOnce.Do(func() {
		compiled, compileErr = compileSchemas()
	})
	return compiled, compileErr
}

func compileSchemas() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Every $ref resolves to an embedded document; never load from the
	// network or the file system.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	for _, name := range append([]string{defsName}, names...) {
		raw, _ := Raw(name)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		if err := c.AddResource(SchemaID(name), doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
	}
	out := make(map[string]*jsonschema.Schema, len(names))
	for _, name := range names {
		sch, err := c.Compile(SchemaID(name))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		out[name] = sch
	}
	return out, nil
}

// Validate checks that data is one JSON document valid against the schema of
// message name (one of Names). It returns nil when it is; otherwise an error
// that says where and why, wrapping ErrUnknownSchema for an unknown name. The
// schemas are compiled on first use; Validate is safe for concurrent use.
func Validate(name string, data []byte) error {
	schemas, err := compileAll()
	if err != nil {
		return err
	}
	sch, ok := schemas[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownSchema, name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: invalid JSON: %w", name, err)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
