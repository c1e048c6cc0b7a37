package operators

import (
	"testing"
)

// TestRegisterTwoInputRoles: a two-input type's roles are two distinct
// names of lower-case letters, digits and '_' starting with a letter (YAML
// keys, and part of a repartition topic name in cluster mode); anything
// else is refused naming the roles.
func TestRegisterTwoInputRoles(t *testing.T) {
	newFn := func(FactoryContext) (any, error) { return nil, nil }
	for _, tc := range []struct {
		roles [2]string
		want  string
	}{
		{[2]string{"left", "right"}, ""},
		{[2]string{"orders", "shipments_2"}, ""},
		{[2]string{"left", "left"}, `operators: register "co": a two-input type names exactly two distinct roles, got ["left" "left"]`},
		{[2]string{"left", ""}, `operators: register "co": a two-input type names exactly two distinct roles, got ["left" ""]`},
		{[2]string{"left", "right side"}, `operators: register "co": input roles are lower-case letters, digits and '_', starting with a letter (a YAML key under inputs, and part of a repartition topic name in cluster mode), got ["left" "right side"]`},
		{[2]string{"Left", "right"}, `operators: register "co": input roles are lower-case letters, digits and '_', starting with a letter (a YAML key under inputs, and part of a repartition topic name in cluster mode), got ["Left" "right"]`},
		{[2]string{"left", "r.x"}, `operators: register "co": input roles are lower-case letters, digits and '_', starting with a letter (a YAML key under inputs, and part of a repartition topic name in cluster mode), got ["left" "r.x"]`},
	} {
		err := NewRegistry().Register(Factory{Type: "co", New: newFn, Traits: Traits{Keyed: true, Inputs: tc.roles}})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("roles %q: %q, want %q", tc.roles, got, tc.want)
		}
	}
}
