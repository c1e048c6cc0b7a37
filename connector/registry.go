package connector

import (
	"fmt"
	"slices"

	"github.com/kstreamd/kstreamd/graph"
)

// Registry holds the source, sink and format types a job may name. It is
// built by the program (job.NewBuiltinConnectors registers the built-ins;
// an SDK user adds their own) and handed down. Not safe for concurrent
// Register; lookups are safe once registration is done.
type Registry struct {
	sources map[string]*SourceFactory
	sinks   map[string]*SinkFactory
	formats map[string]*FormatFactory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{sources: map[string]*SourceFactory{}, sinks: map[string]*SinkFactory{}, formats: map[string]*FormatFactory{}}
}

// checkType refuses an empty or duplicate type name.
func checkType[F any](kind, typ string, m map[string]*F) error {
	if typ == "" {
		return fmt.Errorf("connector: register %s: empty type name", kind)
	}
	if _, dup := m[typ]; dup {
		return fmt.Errorf("connector: register %s %q: type already registered", kind, typ)
	}
	return nil
}

// RegisterSource adds f. It fails when f.Type is empty or already
// registered, or New is nil.
func (r *Registry) RegisterSource(f SourceFactory) error {
	if err := checkType("source", f.Type, r.sources); err != nil {
		return err
	}
	if f.New == nil {
		return fmt.Errorf("connector: register source %q: New is nil", f.Type)
	}
	r.sources[f.Type] = &f
	return nil
}

// RegisterSink adds f. It fails when f.Type is empty or already
// registered, New is nil, f.Deliveries is empty or holds a value outside
// graph.Deliveries, or an exactly-once sink has no Recover (its
// committables would never be committed after a crash).
func (r *Registry) RegisterSink(f SinkFactory) error {
	if err := checkType("sink", f.Type, r.sinks); err != nil {
		return err
	}
	switch {
	case f.New == nil:
		return fmt.Errorf("connector: register sink %q: New is nil", f.Type)
	case len(f.Deliveries) == 0:
		return fmt.Errorf("connector: register sink %q: no deliveries", f.Type)
	case slices.Contains(f.Deliveries, graph.DeliveryExactlyOnce) && f.Recover == nil:
		return fmt.Errorf("connector: register sink %q: exactly-once needs Recover", f.Type)
	}
	for _, d := range f.Deliveries {
		if !d.Valid() {
			return fmt.Errorf("connector: register sink %q: unknown delivery %q", f.Type, d)
		}
	}
	r.sinks[f.Type] = &f
	return nil
}

// RegisterFormat adds f. It fails when f.Type is empty or already
// registered, or New is nil.
func (r *Registry) RegisterFormat(f FormatFactory) error {
	if err := checkType("format", f.Type, r.formats); err != nil {
		return err
	}
	if f.New == nil {
		return fmt.Errorf("connector: register format %q: New is nil", f.Type)
	}
	r.formats[f.Type] = &f
	return nil
}

// Source returns the factory of source type typ; "" is DefaultType.
func (r *Registry) Source(typ string) (*SourceFactory, bool) {
	f, ok := r.sources[orDefault(typ)]
	return f, ok
}

// Sink returns the factory of sink type typ; "" is DefaultType.
func (r *Registry) Sink(typ string) (*SinkFactory, bool) {
	f, ok := r.sinks[orDefault(typ)]
	return f, ok
}

// Format returns the factory of format type typ.
func (r *Registry) Format(typ string) (*FormatFactory, bool) {
	f, ok := r.formats[typ]
	return f, ok
}

// SourceTypes, SinkTypes and FormatTypes return the registered type names,
// sorted.
func (r *Registry) SourceTypes() []string { return sortedKeys(r.sources) }

// SinkTypes: see SourceTypes.
func (r *Registry) SinkTypes() []string { return sortedKeys(r.sinks) }

// FormatTypes: see SourceTypes.
func (r *Registry) FormatTypes() []string { return sortedKeys(r.formats) }

func sortedKeys[F any](m map[string]*F) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// DefaultType is the source and sink type of a config that names none:
// kafka, so every config written before types existed means what it did.
const DefaultType = "kafka"

func orDefault(typ string) string {
	if typ == "" {
		return DefaultType
	}
	return typ
}
