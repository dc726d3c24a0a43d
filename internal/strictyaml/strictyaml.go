// Package strictyaml is capstan's one decoder for configuration that people
// write: YAML or JSON, where an unknown field, a key given twice or an
// empty document is an error that says so, never a silent default.
package strictyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrEmpty is returned for a document with nothing in it.
var ErrEmpty = errors.New("the document is empty")

// Decode decodes raw (YAML or JSON) into v, rejecting an empty document,
// fields v does not have and duplicate keys.
func Decode(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return ErrEmpty
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return fmt.Errorf("not valid JSON or YAML: %s", trimPrefixes(err.Error()))
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding: %s", trimPrefixes(err.Error()))
	}
	if dec.More() {
		return errors.New("decoding: more than one document")
	}
	return nil
}

// trimPrefixes drops the library's "error converting YAML to JSON:" and
// "json:" prefixes, which say nothing to the person who wrote the file.
func trimPrefixes(msg string) string {
	for _, p := range []string{"error converting YAML to JSON: ", "yaml: ", "json: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}
