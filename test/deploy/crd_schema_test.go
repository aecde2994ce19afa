package deploy_test

import (
	"encoding"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// schemaNode is the part of an OpenAPI v3 schema that says which fields an
// object keeps: the API server prunes every field its structural schema
// does not name.
type schemaNode struct {
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
	// AdditionalProperties is a schema or a boolean in OpenAPI; only
	// the schema form says what a map's values keep (mapValues).
	AdditionalProperties  json.RawMessage `json:"additionalProperties"`
	PreserveUnknownFields bool            `json:"x-kubernetes-preserve-unknown-fields"`
}

// mapValues is the schema of a map's values, nil when the node has none.
func (n *schemaNode) mapValues() (*schemaNode, error) {
	if len(n.AdditionalProperties) == 0 || n.AdditionalProperties[0] != '{' {
		return nil, nil
	}
	var values schemaNode
	if err := json.Unmarshal(n.AdditionalProperties, &values); err != nil {
		return nil, err
	}
	return &values, nil
}

// TestUpdatePoolMatchesCRDSchema pins the Go types to the hand-written CRD:
// a field of UpdatePoolSpec or UpdatePoolStatus (nested structs included)
// that the schema lacks is silently dropped by the API server, and a schema
// property without a Go field is stored but lost by every Go client that
// reads and writes the pool back. The failures name the JSON path and the
// side it is missing on.
func TestUpdatePoolMatchesCRDSchema(t *testing.T) {
	root := updatePoolSchema(t)
	for _, c := range []struct {
		property string
		goType   reflect.Type
	}{
		{"spec", reflect.TypeFor[v1alpha1.UpdatePoolSpec]()},
		{"status", reflect.TypeFor[v1alpha1.UpdatePoolStatus]()},
	} {
		schema := root.Properties[c.property]
		if schema == nil {
			t.Errorf("the CRD's openAPIV3Schema has no %s; %s is dropped whole", c.property, c.goType)
			continue
		}
		for _, m := range schemaMismatches(c.property, c.goType, schema) {
			t.Error(m)
		}
	}
}

// TestSchemaMismatchesFindsBothSides checks the checker: on a type and a
// schema that disagree on purpose, it names each path missing on either
// side and nothing else.
func TestSchemaMismatchesFindsBothSides(t *testing.T) {
	type inner struct {
		Kept    string `json:"kept"`
		Dropped string `json:"dropped,omitempty"`
	}
	type Embedded struct {
		Promoted int `json:"promoted"`
	}
	type spec struct {
		Embedded                           // promoted, as encoding/json does
		inner      `json:",inline"`        // promoted too, unexported type and all
		Selector   *metav1.LabelSelector   `json:"selector"` // a leaf
		Duration   metav1.Duration         `json:"duration"` // a leaf (MarshalJSON)
		List       []*inner                `json:"list"`     // items
		ByName     map[string]inner        `json:"byName"`   // additionalProperties
		NoItems    []string                `json:"noItems"`  // the schema has no items
		Ignored    string                  `json:"-"`        // never serialized
		Missing    string                  `json:"missing"`  // not in the schema
		Labels     map[string]string       `json:"labels"`   // leaf values
		Nested     map[string][]inner      `json:"nested"`   // a map of slices
		Pointer    **inner                 `json:"pointer"`  // a double pointer
		Raw        json.RawMessage         `json:"raw"`      // a leaf (MarshalJSON)
		Bytes      []byte                  `json:"bytes"`    // a leaf (base64)
		Any        any                     `json:"any"`      // a leaf
		Times      []metav1.Time           `json:"times"`    // leaf items
		ByIndex    map[string]*metav1.Time `json:"byIndex"`  // leaf values
		Untagged   string                  // named after the Go field
		Conditions []metav1.Condition      `json:"conditions"`
	}
	const schemaYAML = `
properties:
  promoted: {type: integer}
  kept: {type: string}
  selector: {type: object, properties: {matchLabels: {type: object}}}
  duration: {type: string}
  list: {type: array, items: {type: object, properties: {kept: {type: string}, extra: {type: string}}}}
  byName: {type: object, additionalProperties: {type: object, properties: {kept: {type: string}}}}
  noItems: {type: array}
  labels: {type: object, additionalProperties: {type: string}}
  nested: {type: object, additionalProperties: {type: array, items: {type: object, properties: {kept: {type: string}, dropped: {type: string}}}}}
  pointer: {type: object, properties: {kept: {type: string}, dropped: {type: string}}}
  raw: {type: object}
  any: {type: object}
  bytes: {type: string}
  Untagged: {type: string}
  times: {type: array, items: {type: string}}
  byIndex: {type: object, additionalProperties: {type: string}}
  conditions: {type: array, items: {type: object, properties: {type: {type: string}, status: {type: string}, observedGeneration: {type: integer}, lastTransitionTime: {type: string}, reason: {type: string}}}}
  orphan: {type: string}
`
	var schema schemaNode
	if err := yaml.Unmarshal([]byte(schemaYAML), &schema); err != nil {
		t.Fatal(err)
	}
	got := schemaMismatches("spec", reflect.TypeFor[spec](), &schema)
	want := []string{
		"spec.byName{}.dropped: Go field of deploy_test.inner is not in the CRD schema (the API server drops it)",
		"spec.conditions[].message: Go field of v1.Condition is not in the CRD schema (the API server drops it)",
		"spec.dropped: Go field of deploy_test.spec is not in the CRD schema (the API server drops it)",
		"spec.list[].dropped: Go field of deploy_test.inner is not in the CRD schema (the API server drops it)",
		"spec.list[].extra: CRD schema property has no Go field in deploy_test.inner",
		"spec.missing: Go field of deploy_test.spec is not in the CRD schema (the API server drops it)",
		"spec.noItems[]: Go slice element has no items schema in the CRD (the API server drops it)",
		"spec.orphan: CRD schema property has no Go field in deploy_test.spec",
	}
	if !slices.Equal(got, want) {
		t.Errorf("schemaMismatches =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// updatePoolSchema reads the openAPIV3Schema of the UpdatePool CRD's only
// version from manifests/crds.
func updatePoolSchema(t *testing.T) *schemaNode {
	t.Helper()
	const rel = "crds/nodeward.io_updatepools.yaml"
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema *schemaNode `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("decoding %s: %v", rel, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == v1alpha1.Version && v.Schema.OpenAPIV3Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s has no openAPIV3Schema for version %s", rel, v1alpha1.Version)
	return nil
}

// schemaMismatches walks goType's JSON fields and schema side by side from
// path and returns, sorted, every path present on one side only. Types
// that marshal themselves (IntOrString, Duration, Time, Quantity, …), label
// selectors and interfaces are leaves: their schema is not compared.
func schemaMismatches(path string, goType reflect.Type, schema *schemaNode) []string {
	var found []string
	walkSchema(path, goType, schema, &found)
	slices.Sort(found)
	return found
}

func walkSchema(path string, goType reflect.Type, schema *schemaNode, found *[]string) {
	for goType.Kind() == reflect.Pointer {
		goType = goType.Elem()
	}
	// A schema that keeps unknown fields drops nothing beneath it.
	if isJSONLeaf(goType) || schema.PreserveUnknownFields {
		return
	}
	switch goType.Kind() {
	case reflect.Struct:
		walkStruct(path, goType, schema, found)
	case reflect.Slice, reflect.Array:
		if schema.Items == nil {
			*found = append(*found, path+"[]: Go slice element has no items schema in the CRD (the API server drops it)")
			return
		}
		walkSchema(path+"[]", goType.Elem(), schema.Items, found)
	case reflect.Map:
		values, err := schema.mapValues()
		if err != nil {
			*found = append(*found, path+"{}: decoding additionalProperties: "+err.Error())
			return
		}
		if values == nil {
			*found = append(*found, path+"{}: Go map values have no additionalProperties schema in the CRD (the API server drops them)")
			return
		}
		walkSchema(path+"{}", goType.Elem(), values, found)
	}
}

// walkStruct compares a struct's JSON fields with the schema's properties,
// both ways, and walks into the fields both have.
func walkStruct(path string, goType reflect.Type, schema *schemaNode, found *[]string) {
	fields := map[string]reflect.Type{}
	serializedFields(goType, fields)
	for name, fieldType := range fields {
		property := schema.Properties[name]
		if property == nil {
			*found = append(*found, path+"."+name+": Go field of "+goType.String()+" is not in the CRD schema (the API server drops it)")
			continue
		}
		walkSchema(path+"."+name, fieldType, property, found)
	}
	for name := range schema.Properties {
		if _, ok := fields[name]; !ok {
			*found = append(*found, path+"."+name+": CRD schema property has no Go field in "+goType.String())
		}
	}
}

// serializedFields adds to fields the JSON names of goType's serialized fields
// and their types. As in encoding/json, the fields of an embedded struct
// without a JSON name are promoted (Kubernetes types tag those ",inline",
// an option encoding/json ignores), even when its type is unexported.
func serializedFields(goType reflect.Type, fields map[string]reflect.Type) {
	for i := range goType.NumField() {
		f := goType.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		fieldType := f.Type
		for fieldType.Kind() == reflect.Pointer {
			fieldType = fieldType.Elem()
		}
		if f.Anonymous && name == "" && fieldType.Kind() == reflect.Struct && !isJSONLeaf(fieldType) {
			serializedFields(fieldType, fields)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

// isJSONLeaf tells whether the walk stops at t: a scalar, an interface, a
// type with its own JSON or text encoding, or a label selector (a
// Kubernetes type whose schema the CRD spells out by hand).
func isJSONLeaf(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct, reflect.Array, reflect.Map:
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return true // []byte: a base64 string
		}
	default:
		return true
	}
	if t == reflect.TypeFor[metav1.LabelSelector]() {
		return true
	}
	for _, marshaler := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[encoding.TextMarshaler]()} {
		if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
			return true
		}
	}
	return false
}
