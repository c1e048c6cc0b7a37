package sdk

import "github.com/kstreamd/kstreamd/operators"

// Registry holds the operator types a pipeline may name
// (operators.Registry).
type Registry = operators.Registry

// NewRegistry returns a registry holding kstreamd's built-in operator
// types; Register adds one's own.
func NewRegistry() *Registry { return operators.NewBuiltinRegistry() }
