package pipeline

import (
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ConfigError is one problem with a config: where it is and what is wrong.
type ConfigError struct {
	// File is the file name given to Load or Parse; "" for a Config built in
	// code.
	File string
	// Line and Column are 1-based; 0 when unknown (a Config built in code,
	// or a YAML syntax error for which yaml gives no column).
	Line, Column int
	// Path is the field path, as in "operators[0].parallelism"; "" for a
	// problem with the file as a whole.
	Path string
	// Msg says what is wrong, lowercase, naming the offending value.
	Msg string
}

// Error formats the problem as "FILE:LINE:COL: PATH: MSG", leaving out the
// parts that are unknown.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem Load, Parse or Validate found; it is never
// empty when returned as an error. Check for it with errors.As; each
// *ConfigError is also reachable with errors.As through Unwrap.
type ConfigErrors []*ConfigError

// Error formats one problem per line.
func (es ConfigErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems as errors.
func (es ConfigErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// sort orders problems by position, keeping the order of those at the same
// position (and of those without one).
func (es ConfigErrors) sort() {
	slices.SortStableFunc(es, func(a, b *ConfigError) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// position is a 1-based line and column in the file.
type position struct{ line, col int }

func posOf(n *yaml.Node) position { return position{n.Line, n.Column} }

// origin records where each field of a decoded Config was written.
type origin struct {
	file string
	// keys maps a field path to the position of its key, or of the item
	// for a list item ("sources[0]").
	keys map[string]position
	// vals maps a field path to the position of its value; "" is the root.
	vals map[string]position
	// bad holds the paths whose value could not be decoded; Validate does
	// not report again on them or below them.
	bad map[string]bool
	// src is the document's text (nil when unknown), for mapping a place
	// inside a quoted scalar's value back to its column in the file.
	src []byte
}

// position returns where to report a problem with path: its key when it
// was written, else the value of its nearest written ancestor (the mapping
// a missing field belongs in).
func (o *origin) position(path string) position {
	if p, ok := o.keys[path]; ok {
		return p
	}
	for path != "" {
		path = parentPath(path)
		if p, ok := o.vals[path]; ok {
			return p
		}
	}
	return position{}
}

// suppressed reports whether path is at or below a path that failed to
// decode.
func (o *origin) suppressed(path string) bool {
	for {
		if o.bad[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parentPath(path)
	}
}

func (o *origin) newError(path, msg string) *ConfigError {
	p := o.position(path)
	return &ConfigError{File: o.file, Line: p.line, Column: p.col, Path: path, Msg: msg}
}

// parentPath strips the last ".field" or "[i]" from path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
