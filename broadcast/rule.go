package broadcast

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Rule is a shape-pair rule of the reference job: an item of shape First
// followed, under the same key, by an item of shape Second is a match.
// JSON: {"name": "R1", "first": "RECTANGLE", "second": "TRIANGLE"}.
type Rule struct {
	Name   string `json:"name"`
	First  string `json:"first"`
	Second string `json:"second"`
}

// ErrBadRule is wrapped by every error DecodeRule returns.
var ErrBadRule = errors.New("broadcast: bad rule")

// RuleUpdate is one decoded record of the rules topic: a rule to put, or,
// for a record with a null value, the name of a rule to delete.
type RuleUpdate struct {
	// Name is the rule's name: the Kafka key, or the JSON name when the key
	// is empty.
	Name string
	// Rule is the new rule; nil for a deletion.
	Rule *Rule
}

// DecodeRule decodes a record of the rules topic. The Kafka key is the rule
// name; a null value deletes the rule named by the key. A value must be a
// JSON object with non-empty string fields name, first and second and no
// others; when the key is not empty it must equal name. Errors wrap
// ErrBadRule.
func DecodeRule(key, value []byte) (RuleUpdate, error) {
	if value == nil {
		if len(key) == 0 {
			return RuleUpdate{}, fmt.Errorf("%w: deletion (null value) without a key", ErrBadRule)
		}
		return RuleUpdate{Name: string(key)}, nil
	}
	var r Rule
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return RuleUpdate{}, fmt.Errorf("%w: %v", ErrBadRule, err)
	}
	if dec.More() {
		return RuleUpdate{}, fmt.Errorf("%w: trailing data after the JSON object", ErrBadRule)
	}
	switch {
	case r.Name == "":
		return RuleUpdate{}, fmt.Errorf("%w: name is empty", ErrBadRule)
	case r.First == "":
		return RuleUpdate{}, fmt.Errorf("%w: rule %q: first is empty", ErrBadRule, r.Name)
	case r.Second == "":
		return RuleUpdate{}, fmt.Errorf("%w: rule %q: second is empty", ErrBadRule, r.Name)
	case len(key) > 0 && string(key) != r.Name:
		return RuleUpdate{}, fmt.Errorf("%w: key %q differs from name %q", ErrBadRule, key, r.Name)
	}
	return RuleUpdate{Name: r.Name, Rule: &r}, nil
}
