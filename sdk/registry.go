package sdk

import (
	"log/slog"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/pipeline"
)

// Registry holds the types a pipeline may name: operator types (the
// embedded operators.Registry: Register, Lookup, Types) and source, sink
// and format types (Connectors, a connector.Registry; RegisterSource,
// RegisterSink and RegisterFormat add to it). A user's binary adds its
// own types with the calls kstreamd's built-ins are registered with, then
// hands the registry to Main or Run.
type Registry struct {
	*operators.Registry
	// Connectors holds the source, sink and format types.
	Connectors *connector.Registry
}

// NewRegistry returns a registry holding kstreamd's built-in types: its
// operators (operators.Builtins), the kafka source and sink, and the
// formats json, string and bytes (job.NewBuiltinConnectors).
func NewRegistry() *Registry {
	return &Registry{Registry: operators.NewBuiltinRegistry(), Connectors: job.NewBuiltinConnectors()}
}

// RegisterSource adds a source type (connector.Registry.RegisterSource).
func (r *Registry) RegisterSource(f connector.SourceFactory) error {
	return r.Connectors.RegisterSource(f)
}

// RegisterSink adds a sink type (connector.Registry.RegisterSink).
func (r *Registry) RegisterSink(f connector.SinkFactory) error { return r.Connectors.RegisterSink(f) }

// RegisterFormat adds a format type (connector.Registry.RegisterFormat).
func (r *Registry) RegisterFormat(f connector.FormatFactory) error {
	return r.Connectors.RegisterFormat(f)
}

// pipelineRegistries returns r as the pipeline's registries; nil fields
// mean the built-in types.
func (r *Registry) pipelineRegistries() pipeline.Registries {
	if r == nil {
		return pipeline.Registries{}
	}
	return pipeline.Registries{Operators: r.Registry, Connectors: r.Connectors}
}

// The connector types a program registers its own sources, sinks and
// formats with (package connector).
type (
	// SourceFactory declares a source type (connector.SourceFactory).
	SourceFactory = connector.SourceFactory
	// SinkFactory declares a sink type (connector.SinkFactory).
	SinkFactory = connector.SinkFactory
	// FormatFactory declares a format (connector.FormatFactory).
	FormatFactory = connector.FormatFactory
	// Format decodes values at a source and encodes them at a sink
	// (connector.Format).
	Format = connector.Format
	// Committer is the transactional system of an exactly-once sink type
	// (connector.Committer); NewTwoPhaseCommitSink drives it.
	Committer = connector.Committer
	// FormatContext is what a FormatFactory's New gets: the vertex, its
	// Role, the topic, the decoded params (connector.FormatContext).
	FormatContext = connector.FormatContext
	// Role says which end of a job a format serves: RoleSource or
	// RoleSink (connector.Role). FormatFactory.Roles limits a format to
	// some; RoleParamsChecker.CheckRole is told which one its params are
	// used in.
	Role = connector.Role
	// RoleParamsChecker is implemented by format params whose fields
	// apply to one role only, so that `kstreamd validate` refuses a field
	// a role does not use at its FILE:LINE:COL
	// (connector.RoleParamsChecker).
	RoleParamsChecker = connector.RoleParamsChecker
)

// The roles of a format (connector.RoleSource, connector.RoleSink).
const (
	// RoleSource: the format decodes the values a source reads.
	RoleSource = connector.RoleSource
	// RoleSink: the format encodes the values a sink writes.
	RoleSink = connector.RoleSink
)

// NewTwoPhaseCommitSink returns subtask subtask of the exactly-once sink
// called name, of sink type typ, over committer
// (connector.NewTwoPhaseCommitSink).
func NewTwoPhaseCommitSink(typ, name string, subtask int, committer Committer, logger *slog.Logger) *connector.TwoPhaseCommitSink {
	return connector.NewTwoPhaseCommitSink(typ, name, subtask, committer, logger)
}
