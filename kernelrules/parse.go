package kernelrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// ParseError is a rule file that does not decode or validate. Field is
// where in the file the problem is, as a JSON path that also names a
// rule's reason (`rules[3] (reason "TaskHung").pattern`); it is empty when
// the problem is the file as a whole.
type ParseError struct {
	File  string
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Err.Error()
	}
	return e.File + ": " + e.Field + ": " + e.Err.Error()
}

func (e *ParseError) Unwrap() error { return e.Err }

// Parse decodes the rule file data, read from the file called name (used
// in errors only), applies NPD's defaults (bufferSize 10) and validates it.
// Every problem found is returned, joined; each is a *ParseError.
func Parse(name string, data []byte) (*File, error) {
	file, err := decode(name, data)
	if err != nil {
		return nil, err
	}
	if file.BufferSize == 0 {
		file.BufferSize = DefaultBufferSize
	}
	if err := validate(name, file); err != nil {
		return nil, err
	}
	return file, nil
}

// decode reads exactly one JSON object with no fields outside the format.
func decode(name string, data []byte) (*File, error) {
	var file File
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&file); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return nil, locateUnknownField(name, data, err)
		}
		return nil, &ParseError{File: name, Err: fmt.Errorf("decoding JSON: %w", err)}
	}
	if _, err := decoder.Token(); err != io.EOF {
		return nil, &ParseError{File: name, Err: errors.New("decoding JSON: unexpected data after the top-level object")}
	}
	return &file, nil
}

// locateUnknownField turns encoding/json's bare `unknown field "x"` into an
// error that says where x is, so a typo in rule 12 is found without
// bisecting the file. It falls back to the bare error if it cannot tell.
func locateUnknownField(name string, data []byte, decodeErr error) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return &ParseError{File: name, Err: decodeErr}
	}
	if err := unknownKeys(name, "", top, fieldNames(File{})); err != nil {
		return err
	}
	for _, list := range []struct {
		key, labelKey string
		known         []string
	}{
		{"rules", "reason", fieldNames(Rule{})},
		{"conditions", "type", fieldNames(Condition{})},
	} {
		var items []map[string]json.RawMessage
		if json.Unmarshal(lookupFold(top, list.key), &items) != nil {
			continue
		}
		for i, item := range items {
			var label string
			_ = json.Unmarshal(lookupFold(item, list.labelKey), &label)
			path := itemPath(list.key, i, list.labelKey, label)
			if err := unknownKeys(name, path+".", item, list.known); err != nil {
				return err
			}
		}
	}
	return &ParseError{File: name, Err: decodeErr}
}

// unknownKeys reports the first key of object, in sorted order so the
// report is stable, that is none of known. encoding/json matches names
// case-insensitively, and NPD decodes with it, so this does too.
func unknownKeys(name, prefix string, object map[string]json.RawMessage, known []string) error {
	for _, key := range slices.Sorted(maps.Keys(object)) {
		if lookupKnown(key, known) {
			continue
		}
		return &ParseError{
			File:  name,
			Field: prefix + key,
			Err:   fmt.Errorf("unknown field (known fields: %s)", strings.Join(known, ", ")),
		}
	}
	return nil
}

func lookupKnown(key string, known []string) bool {
	for _, name := range known {
		if strings.EqualFold(key, name) {
			return true
		}
	}
	return false
}

func lookupFold(object map[string]json.RawMessage, key string) json.RawMessage {
	for k, v := range object {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// itemPath names a list element by index and, when it has one, by the
// field people know it by: `rules[3] (reason "TaskHung")`.
func itemPath(list string, index int, labelKey, label string) string {
	path := fmt.Sprintf("%s[%d]", list, index)
	if label != "" {
		path += fmt.Sprintf(" (%s %q)", labelKey, label)
	}
	return path
}
