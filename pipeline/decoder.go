package pipeline

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/sink"
	"gopkg.in/yaml.v3"
)

// Load reads the file at path and returns its Config, as Parse does with
// path as the file name in messages. An error reading the file is returned
// wrapped (errors.Is(err, fs.ErrNotExist) works); every problem with its
// content is returned as ConfigErrors.
//
// reg holds the operator types the pipeline may name (with their params
// schemas); nil means operators.NewBuiltinRegistry().
func Load(path string, reg *operators.Registry) (*Config, error) {
	return LoadWith(path, Registries{Operators: reg})
}

// Registries are the type registries a pipeline may name: operator types,
// and source, sink and format types. A nil field means the built-in types
// (operators.NewBuiltinRegistry, job.NewBuiltinConnectors).
type Registries struct {
	Operators  *operators.Registry
	Connectors *connector.Registry
}

// LoadWith is Load with the connector registry too.
func LoadWith(path string, reg Registries) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: read config: %w", err)
	}
	return ParseWith(path, data, reg)
}

// Parse decodes data, one YAML document, into a Config: it starts from
// Default, sets each list item's defaults before decoding it, refuses unknown
// fields, wrong types and duplicate keys at every level, and runs Validate.
// name is the file name used in messages.
//
// On failure the Config is nil and the error is a ConfigErrors listing every
// problem found, in file order, each with its line and column (a YAML syntax
// error stops decoding and is the only one reported).
//
// Parse also plans the job graph (Config.Plan) and reports what the planner
// refuses (unknown operator types and params, keys, cycles, traits), so
// that validate refuses exactly what run refuses. reg as in Load.
func Parse(name string, data []byte, reg *operators.Registry) (*Config, error) {
	return ParseWith(name, data, Registries{Operators: reg})
}

// ParseWith is Parse with the connector registry too.
func ParseWith(name string, data []byte, reg Registries) (*Config, error) {
	o := &origin{
		file: name,
		keys: map[string]position{},
		vals: map[string]position{},
		bad:  map[string]bool{},
		src:  data,
	}
	root, perr := parseDocument(name, data)
	if perr != nil {
		return nil, ConfigErrors{perr}
	}
	c := Default()
	c.src = o
	c.reg, c.conns = reg.Operators, reg.Connectors
	d := &decoder{o: o}
	o.vals[""] = posOf(root)
	d.decode(root, reflect.ValueOf(c).Elem(), "")
	if d.tooLarge != nil {
		return nil, ConfigErrors{d.tooLarge}
	}
	c.deriveCheckpointTimeout()
	c.deriveIncremental()
	c.derivePoolSizes()
	errs := append(d.errs, c.validate()...)
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return c, nil
}

// syntaxLineRE matches the line yaml.v3 puts in its syntax errors.
var syntaxLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxLineSearch and maxLineSearchBytes bound the prefixes findErrorLine
// parses: their number and their total size.
const (
	maxLineSearch      = 2000
	maxLineSearchBytes = 4 << 20
)

// parseDocument parses data into the root mapping of its only document.
func parseDocument(name string, data []byte) (*yaml.Node, *ConfigError) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
		}
		return nil, syntaxError(name, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(name, data, err)
	default:
		return nil, &ConfigError{File: name, Line: extra.Line, Column: extra.Column,
			Msg: "a second YAML document: a config is exactly one document"}
	}
	if len(doc.Content) != 1 {
		return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &ConfigError{File: name, Line: root.Line, Column: root.Column,
			Msg: "config must be a mapping of fields, got " + describe(root)}
	}
	return root, nil
}

// syntaxError turns a yaml.v3 parse error into a ConfigError at yaml's own
// line. yaml gives no column, and no line for errors on the first line or
// found after parsing (an unknown anchor); for those the line is the first
// whose prefix of the file fails with the same message.
func syntaxError(name string, data []byte, err error) *ConfigError {
	msg := err.Error()
	if m := syntaxLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ConfigError{File: name, Line: line, Msg: "yaml syntax: " + m[2]}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	return &ConfigError{File: name, Line: findErrorLine(data, err.Error()), Msg: "yaml syntax: " + msg}
}

// findErrorLine returns the first line n such that the first n lines of
// data fail to parse with message msg, or 0.
func findErrorLine(data []byte, msg string) int {
	end, parsed := 0, 0
	for line := 1; line <= maxLineSearch && end < len(data) && parsed < maxLineSearchBytes; line++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		parsed += end
		dec := yaml.NewDecoder(bytes.NewReader(data[:end]))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if err == nil {
				continue
			}
			if err.Error() == msg {
				return line
			}
			break
		}
	}
	return 0
}

// describe names what a node holds, for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	default:
		return "an alias"
	}
}

// maxDecodeNodes bounds the keys and values one decode visits (a config of
// a thousand operators visits about 15,000), so that aliases cannot blow a
// small file up into a huge amount of work or of problems.
const maxDecodeNodes = 50_000

// decoder walks a yaml.Node tree into a struct, strictly: yaml.v3's
// KnownFields is lost by node.Decode (go-yaml/yaml issue 460), so the walk
// itself refuses unknown and duplicate keys and wrong types at every level,
// keeping each problem's line and column.
type decoder struct {
	o       *origin
	errs    ConfigErrors
	visited int
	// tooLarge is set once visited exceeds maxDecodeNodes.
	tooLarge *ConfigError
	// valueErrs is set by any error other than an unknown, repeated or
	// non-string key: a field then holds no decoded value, so checks that
	// read several fields (operators.ParamsChecker) are not run on it.
	valueErrs bool
}

// defaulter is implemented by list item types with defaults; the decoder
// calls setDefaults on each new item before decoding into it.
type defaulter interface{ setDefaults() }

// Defaulter is implemented by list item types of operator params with
// defaults: the decoder calls SetDefaults on each new item before decoding
// into it.
type Defaulter interface{ SetDefaults() }

var (
	durationType        = reflect.TypeFor[time.Duration]()
	nodeType            = reflect.TypeFor[yaml.Node]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// positioned is implemented by errors that know where in a scalar's text
// they are (expression.CompileError): 1-based line and column within it.
type positioned interface{ Position() (line, col int) }

// integerRE matches a decimal integer, which yaml resolves to a float when
// it does not fit in 64 bits.
var integerRE = regexp.MustCompile(`^[-+]?[0-9]+$`)

// fail records a problem with path and stops Validate from reporting on it
// again.
func (d *decoder) fail(path, msg string) {
	d.errs = append(d.errs, d.o.newError(path, msg))
	d.o.bad[path] = true
	d.valueErrs = true
}

// failAt records a problem at an explicit position.
func (d *decoder) failAt(n *yaml.Node, path, msg string) {
	d.errs = append(d.errs, &ConfigError{File: d.o.file, Line: n.Line, Column: n.Column, Path: path, Msg: msg})
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// step counts one more node visited and reports whether the budget allows
// visiting it; past the budget it records tooLarge, the only problem Parse
// then reports.
func (d *decoder) step(n *yaml.Node, path string) bool {
	d.visited++
	if d.visited <= maxDecodeNodes {
		return true
	}
	if d.tooLarge == nil {
		d.tooLarge = &ConfigError{File: d.o.file, Line: n.Line, Column: n.Column, Path: path,
			Msg: fmt.Sprintf("config too large: more than %d fields and values after expanding aliases", maxDecodeNodes)}
	}
	return false
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolveAlias(n)
	if !d.step(n, path) {
		return
	}
	tag := n.ShortTag()
	if n.Kind == yaml.ScalarNode && tag == "!!null" {
		return // like yaml.v3: null keeps the default
	}
	if !strings.HasPrefix(tag, "!!") {
		d.fail(path, "unsupported YAML tag "+n.Tag)
		return
	}
	if v.Type() == durationType {
		d.decodeDuration(n, v, path)
		return
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n)) // kept for a second decode (operator params)
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType) {
		d.decodeText(n, v.Addr().Interface().(encoding.TextUnmarshaler), path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || !slices.Contains([]string{"!!str", "!!int", "!!float", "!!timestamp"}, tag) {
			d.fail(path, "must be a string, got "+describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if n.Kind == yaml.ScalarNode && tag == "!!float" && integerRE.MatchString(n.Value) {
			d.fail(path, "integer out of range: "+n.Value) // yaml resolves too large an integer to a float
			return
		}
		if n.Kind != yaml.ScalarNode || tag != "!!int" {
			d.fail(path, "must be an integer, got "+describe(n))
			return
		}
		if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
			d.fail(path, "integer out of range: "+n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
			d.fail(path, "must be a number, got "+describe(n))
			return
		}
		if err := n.Decode(&f); err != nil {
			d.fail(path, "number out of range: "+n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || tag != "!!bool" {
			d.fail(path, "must be true or false, got "+describe(n))
			return
		}
		if err := n.Decode(&b); err != nil {
			d.fail(path, "must be true or false, got "+describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Pointer:
		// An optional field (*bool: set or not): the value decoded into a
		// new element.
		p := reflect.New(v.Type().Elem())
		if df, ok := p.Interface().(defaulter); ok {
			df.setDefaults() // an optional section's defaults (state.remote)
		}
		d.decode(n, p.Elem(), path)
		v.Set(p)
	default:
		d.fail(path, "pipeline: no decoder for field type "+v.Type().String())
	}
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	tag := n.ShortTag()
	if n.Kind == yaml.ScalarNode && (tag == "!!str" || tag == "!!int") {
		if dur, err := time.ParseDuration(n.Value); err == nil {
			v.SetInt(int64(dur))
			return
		}
	}
	d.fail(path, "must be a duration such as 30s or 1m30s, got "+describe(n))
}

// decodeText decodes a scalar through its type's UnmarshalText (an
// expression compiles there); an error that knows its place in the text is
// reported there: same line, column shifted, for an unquoted or quoted
// single-line scalar.
func (d *decoder) decodeText(n *yaml.Node, u encoding.TextUnmarshaler, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "must be a string, got "+describe(n))
		return
	}
	err := u.UnmarshalText([]byte(n.Value))
	if err == nil {
		return
	}
	var p positioned
	if errors.As(err, &p) && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		line, col := p.Position()
		if line == 1 && col > 0 && !strings.Contains(n.Value, "\n") {
			column, ok := n.Column+col-1, true
			if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
				column, ok = d.quotedColumn(n, col)
			}
			if ok {
				d.failAt(&yaml.Node{Line: n.Line, Column: column}, path, err.Error())
				d.o.bad[path] = true
				d.valueErrs = true
				return
			}
		}
	}
	d.fail(path, err.Error())
}

// quotedColumn returns the column in the file (1-based, in characters, as
// yaml.v3 counts) of the col'th character of the value of n, a quoted
// scalar starting at n.Line:n.Column with its opening quote. It walks the
// raw scalar on that line, so that an escape (\" or \t or \u00e9 in a
// double-quoted scalar, a doubled quote in a single-quoted one) counts as the one
// character it decodes to. ok is false when the character is not on the
// scalar's first line (a quoted scalar folded over lines) or the source
// does not hold the scalar there.
func (d *decoder) quotedColumn(n *yaml.Node, col int) (column int, ok bool) {
	lines := bytes.SplitN(d.o.src, []byte("\n"), n.Line+1)
	if n.Line < 1 || n.Line > len(lines) {
		return 0, false
	}
	raw := []rune(string(lines[n.Line-1]))
	i := n.Column - 1 // the opening quote
	if i < 0 || i >= len(raw) {
		return 0, false
	}
	quote := raw[i]
	if (quote != '"' || n.Style&yaml.DoubleQuotedStyle == 0) && (quote != '\'' || n.Style&yaml.SingleQuotedStyle == 0) {
		return 0, false
	}
	i++
	for decoded := 1; i < len(raw); decoded++ {
		if decoded == col {
			return i + 1, true
		}
		switch {
		case quote == '\'' && raw[i] == '\'' && i+1 < len(raw) && raw[i+1] == '\'':
			i += 2 // '' is one quote
		case raw[i] == quote:
			return 0, false // the closing quote: col is past the value
		case quote == '"' && raw[i] == '\\' && i+1 < len(raw):
			switch raw[i+1] {
			case 'x':
				i += 4
			case 'u':
				i += 6
			case 'U':
				i += 10
			default:
				i += 2
			}
		default:
			i++
		}
	}
	return 0, false
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, "must be a list, got "+describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		d.o.keys[ipath] = posOf(item)
		d.o.vals[ipath] = posOf(resolveAlias(item))
		e := reflect.New(v.Type().Elem())
		if df, ok := e.Interface().(defaulter); ok {
			df.setDefaults()
		}
		if df, ok := e.Interface().(Defaulter); ok {
			df.SetDefaults()
		}
		d.decode(item, e.Elem(), ipath)
		s = reflect.Append(s, e.Elem())
	}
	v.Set(s)
}

// decodeMap decodes a mapping into a map with string keys (operator params
// such as map's headers: {name: expression}): every key is a string, each
// value decoded as its type at path "<path>.<key>"; duplicate keys are
// refused.
func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if v.Type().Key().Kind() != reflect.String {
		d.fail(path, "pipeline: no decoder for field type "+v.Type().String())
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping, got "+describe(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolveAlias(n.Content[i]), n.Content[i+1]
		if !d.step(k, path) {
			return
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.failAt(k, path, "keys must be strings, got "+describe(k))
			continue
		}
		kpath := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.failAt(k, kpath, fmt.Sprintf("duplicate key (first set on line %d)", line))
			continue
		}
		seen[k.Value] = k.Line
		d.o.keys[kpath] = posOf(k)
		d.o.vals[kpath] = posOf(resolveAlias(val))
		e := reflect.New(v.Type().Elem())
		d.decode(val, e.Elem(), kpath)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e.Elem())
	}
	v.Set(m)
}

// fieldNames returns the yaml names of a struct type's fields, mapped to
// their index, and in declaration order.
func fieldNames(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping of fields, got "+describe(n))
		return
	}
	idx, names := fieldNames(v.Type())
	seen := map[string]int{}
	var suggested []string // fields a misspelt key probably meant
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolveAlias(n.Content[i]), n.Content[i+1]
		if !d.step(k, path) {
			return
		}
		if k.Kind != yaml.ScalarNode {
			d.failAt(k, path, "field names must be strings, got "+describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.failAt(k, path, "merge keys (<<) are not supported; write the fields out")
			d.o.bad[path] = true // the merged fields would be missing
			d.valueErrs = true
			continue
		}
		fpath := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.failAt(k, fpath, fmt.Sprintf("duplicate field (first set on line %d)", line))
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := idx[k.Value]
		if !ok {
			msg, s := unknownField(k.Value, names)
			d.failAt(k, fpath, msg)
			if s != "" {
				suggested = append(suggested, s)
			}
			continue
		}
		d.o.keys[fpath] = posOf(k)
		d.o.vals[fpath] = posOf(resolveAlias(val))
		d.decode(val, v.Field(fi), fpath)
	}
	// A field a misspelt key meant is not also reported missing.
	for _, s := range suggested {
		if _, set := seen[s]; !set {
			d.o.bad[joinPath(path, s)] = true
			d.valueErrs = true
		}
	}
}

// fieldAliases maps names other systems use to the field kstreamd calls it,
// for "did you mean"; a suggestion is only made when that field exists
// where the unknown one was written.
var fieldAliases = map[string]string{
	"bootstrap":          "brokers",
	"bootstrap_servers":  "brokers",
	"bootstrap.servers":  "brokers",
	"servers":            "brokers",
	"seed_brokers":       "brokers",
	"auto_offset_reset":  "start_from",
	"auto.offset.reset":  "start_from",
	"offset":             "start_from",
	"startup_mode":       "start_from",
	"delivery_guarantee": "delivery",
	"semantic":           "delivery",
	"guarantee":          "delivery",
	"key":                "key_by",
	"keyed_by":           "key_by",
	"partition_by":       "key_by",
	"kind":               "type",
	"from":               "input",
	"source":             "input",
	"max_parallel":       "max_parallelism",
}

// unknownField returns the message for an unknown key among the fields
// names, and the field it probably meant, if any.
func unknownField(key string, names []string) (msg, meant string) {
	if alias, ok := fieldAliases[key]; ok && slices.Contains(names, alias) {
		meant = alias
	} else {
		meant = suggest(key, names)
	}
	if meant != "" {
		return fmt.Sprintf("unknown field (did you mean %q?)", meant), meant
	}
	return "unknown field; known fields are " + strings.Join(names, ", "), ""
}

// suggest returns the candidate closest to s in edit distance, if it is
// close enough to be a likely typo, else "".
func suggest(s string, candidates []string) string {
	best, bestDist := "", math.MaxInt
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist <= max(1, min(len(s), len(best))/3) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, counting an
// adjacent transposition as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		if a == b {
			return 0
		}
		return math.MaxInt / 2
	}
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// derivePoolSizes sets the pool_size of every sink that does not set it to
// sink.PoolSizeFor(checkpoints.tolerable_failures): a pool of n
// transactional ids rides out n - 3 failed checkpoints in a row, so the
// default pool rides out as many as the job tolerates.
func (c *Config) derivePoolSizes() {
	for i := range c.Sinks {
		if _, written := c.src.keyWritten(fmt.Sprintf("sinks[%d].pool_size", i)); !written {
			c.Sinks[i].PoolSize = sink.PoolSizeFor(c.Checkpoints.TolerableFailures)
		}
	}
}

// deriveCheckpointTimeout lowers the default checkpoints.timeout (10m) when
// the file does not set it and an exactly-once sink's transaction_timeout T
// leaves less room: to (T - checkpoints.interval) / 2 (in cluster mode
// ((T - cluster.session_timeout - cluster.rebalance_timeout -
// cluster.takeover_timeout) / (checkpoints.tolerable_failures + 1) -
// checkpoints.interval) / 2, with cluster.repartition_transaction_timeout
// one of the T), when that is at least 100ms, so that a checkpoint
// times out (and the job retries or restarts) before its pre-committed
// transactions can outlive their timeout, with the other half left for a
// restart. A file that sets checkpoints.timeout keeps its value, and
// validation refuses T <= interval + timeout naming the three values.
func (c *Config) deriveCheckpointTimeout() {
	if _, written := c.src.keyWritten("checkpoints.timeout"); written {
		return
	}
	iv := c.Checkpoints.Interval
	if iv == 0 {
		return
	}
	// Cluster mode's bound (ClusterTxnBound) is (tolerable_failures + 1)
	// x (interval + timeout) plus the session, rebalance and takeover
	// timeouts: the room left for the checkpoint is what remains of them,
	// shared by the tolerated attempts; the repartition sinks' timeout
	// counts as an exactly-once sink's.
	var fixed time.Duration
	attempts := time.Duration(1)
	timeouts := []time.Duration{}
	if c.Cluster.Enabled {
		cl := &c.Cluster
		fixed = cl.SessionTimeout + cl.RebalanceTimeout + cl.TakeoverTimeout
		attempts = time.Duration(c.Checkpoints.TolerableFailures + 1)
		timeouts = append(timeouts, cl.RepartitionTransactionTimeout)
	}
	for i := range c.Sinks {
		if s := &c.Sinks[i]; s.Delivery == DeliveryExactlyOnce {
			timeouts = append(timeouts, s.TransactionTimeout)
		}
	}
	for _, t := range timeouts {
		if t > fixed+attempts*(iv+c.Checkpoints.Timeout) {
			continue
		}
		// Below minDerivedCheckpointTimeout the default stays, and
		// validation refuses the transaction timeout naming every term:
		// a checkpoint that must finish within milliseconds never would.
		if d := ((t-fixed)/attempts - iv) / 2; d >= minDerivedCheckpointTimeout {
			c.Checkpoints.Timeout = d
			c.derivedTimeout = true
		}
	}
}

// deriveIncremental turns checkpoints.incremental on in cluster mode when
// the file does not set it: every keyed unit checkpoints once per interval,
// and a full checkpoint copies and uploads every Pebble SST each time, so
// cluster jobs pay most for full checkpoints (Flink's
// execution.checkpointing.incremental, whose default is false, as it is
// here in a single process). A file that sets it, to false too, keeps its
// value. validate and run both parse through here, so they agree.
func (c *Config) deriveIncremental() {
	if !c.Cluster.Enabled {
		return
	}
	if _, written := c.src.keyWritten("checkpoints.incremental"); written {
		return
	}
	c.Checkpoints.Incremental = true
}

// minDerivedCheckpointTimeout is the least checkpoints.timeout
// deriveCheckpointTimeout sets.
const minDerivedCheckpointTimeout = 100 * time.Millisecond
