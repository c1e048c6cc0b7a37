package pipeline

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Validate checks the Config and returns nil or a ConfigErrors listing every
// problem: impossible values, missing required fields, duplicate names, and
// references to names that do not exist. Load and Parse call it; call it
// again after changing a Config in code. Problems in a Config that came from
// a file carry its file, line and column.
func (c *Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		errs.sort()
		return errs
	}
	return nil
}

// validator collects the problems Validate finds.
type validator struct {
	c    *Config
	errs ConfigErrors
	// inputNames are the names of sources and operators, sorted; built on
	// the first unknown reference.
	inputNames []string
	// suggested caches "did you mean" answers by unknown name.
	suggested map[string]string
}

func (v *validator) errorf(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if v.c.src == nil {
		v.errs = append(v.errs, &ConfigError{Path: path, Msg: msg})
		return
	}
	if v.c.src.suppressed(path) {
		return
	}
	v.errs = append(v.errs, v.c.src.newError(path, msg))
}

// required reports a required field that is unset.
func (v *validator) required(path string) {
	switch _, written := v.c.src.keyWritten(path); {
	case v.c.src == nil:
		v.errorf(path, "required")
	case written:
		v.errorf(path, "must not be empty")
	default:
		v.errorf(path, "required field is missing")
	}
}

func (o *origin) keyWritten(path string) (position, bool) {
	if o == nil {
		return position{}, false
	}
	p, ok := o.keys[path]
	return p, ok
}

// oneOf reports value unless it is one of allowed.
func (v *validator) oneOf(path, value string, allowed ...string) {
	if slices.Contains(allowed, value) {
		return
	}
	want := strings.Join(allowed, ", ")
	if value == "" {
		v.errorf(path, "must be one of %s", want)
		return
	}
	if s := suggest(value, allowed); s != "" {
		v.errorf(path, "unknown value %q (did you mean %q?); want one of %s", value, s, want)
		return
	}
	v.errorf(path, "unknown value %q; want one of %s", value, want)
}

// spellings returns the config spellings of an enum's values, for oneOf.
func spellings[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// parallelism checks a parallelism field: in [lo, 32768], where lo is 0 for
// fields whose 0 means "inherit".
func (v *validator) parallelism(path string, p, lo int) {
	switch {
	case p < lo && lo == 0:
		v.errorf(path, "must be >= 0 (0 inherits), got %d", p)
	case p < lo:
		v.errorf(path, "must be >= %d, got %d", lo, p)
	case p > keygroup.UpperBoundMaxParallelism:
		v.errorf(path, "must be <= %d, got %d", keygroup.UpperBoundMaxParallelism, p)
	}
}

// hostPort checks a host:port address; the host may be empty only for a
// listen address.
func (v *validator) hostPort(path, addr string, listen bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.errorf(path, "invalid address %q: want host:port", addr)
		return
	}
	if host == "" && !listen {
		v.errorf(path, "invalid address %q: missing host", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.errorf(path, "invalid address %q: port must be a number in [1, 65535]", addr)
	}
}

// topicNameRE is the alphabet of Kafka topic names.
var topicNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// maxTopicNameLen is Kafka's limit on topic name length.
const maxTopicNameLen = 249

// topic checks a Kafka topic name as the broker does (Kafka's
// org.apache.kafka.common.internals.Topic.validate).
func (v *validator) topic(path, t string) {
	switch {
	case t == "":
		v.required(path)
	case t == "." || t == "..":
		v.errorf(path, "invalid topic name %q: cannot be \".\" or \"..\"", t)
	case len(t) > maxTopicNameLen:
		v.errorf(path, "invalid topic name: %d characters, at most %d allowed", len(t), maxTopicNameLen)
	case !topicNameRE.MatchString(t):
		v.errorf(path, "invalid topic name %q: only ASCII letters, digits, '.', '_' and '-' are allowed", t)
	}
}

var jobNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// stage is a named source, operator or sink.
type stage struct {
	kind  string // "source", "operator" or "sink"
	index int
	path  string // e.g. "operators[1]"
}

func (c *Config) validate() ConfigErrors {
	v := &validator{c: c}
	c.validateJob(v)
	c.validateRuntime(v)
	stages := c.validateNames(v)
	c.validateSources(v)
	c.validateOperators(v, stages)
	c.validateSinks(v, stages)
	c.validateFileSinks(v)
	c.validatePostgresSinks(v)
	c.validateDemo(v)
	c.validateCluster(v)
	c.validateSchemaRegistry(v)
	return v.errs
}

func (c *Config) validateJob(v *validator) {
	switch {
	case c.Job.Name == "":
		v.required("job.name")
	case !jobNameRE.MatchString(c.Job.Name):
		v.errorf("job.name", "invalid job name %q: must match [a-z0-9][a-z0-9_-]*", c.Job.Name)
	}
	v.parallelism("job.parallelism", c.Job.Parallelism, 1)
	mp := c.Job.MaxParallelism
	if mp == 0 {
		return
	}
	if mp < 1 || mp > keygroup.UpperBoundMaxParallelism {
		v.errorf("job.max_parallelism", "must be 0 (derive) or in [1, %d], got %d", keygroup.UpperBoundMaxParallelism, mp)
		return
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		if p := c.OperatorParallelism(op); p > mp {
			v.errorf("job.max_parallelism", "%d is less than the parallelism %d of operators[%d] (%q)", mp, p, i, op.Name)
		}
	}
}

func (c *Config) validateRuntime(v *validator) {
	if c.DataDir == "" {
		v.required("data_dir")
	}
	k := &c.Kafka
	if len(k.Brokers) == 0 && !k.Embedded.Enabled {
		v.errorf("kafka.brokers", "required unless kafka.embedded.enabled is true")
	}
	for i, b := range k.Brokers {
		v.hostPort(fmt.Sprintf("kafka.brokers[%d]", i), b, false)
	}
	if k.ClientID == "" {
		v.required("kafka.client_id")
	}
	v.hostPort("kafka.embedded.address", k.Embedded.Address, true)
	if k.Embedded.Partitions < 1 {
		v.errorf("kafka.embedded.partitions", "must be >= 1, got %d", k.Embedded.Partitions)
	}
	c.validateSecurity(v)
	v.oneOf("state.backend", string(c.State.Backend), string(StateBackendHashMap), string(StateBackendPebble))
	if c.State.BlockCacheBytes < 0 {
		v.errorf("state.block_cache_bytes", "must be >= 0, got %d", c.State.BlockCacheBytes)
	}
	if c.State.WriteCacheBytes < -1 {
		v.errorf("state.write_cache_bytes", "must be >= -1 (-1: no write cache, 0: the default 16 MiB), got %d", c.State.WriteCacheBytes)
	}
	if c.State.L0CompactionThreshold < 0 {
		v.errorf("state.l0_compaction_threshold", "must be >= 0 (0: the default 16), got %d", c.State.L0CompactionThreshold)
	}
	c.validateRemoteState(v)
	c.validateProcess(v)
	if c.Metrics.Address != "" {
		v.hostPort("metrics.address", c.Metrics.Address, true)
	}
	if c.Metrics.BearerTokenEnv != "" && c.Metrics.BearerTokenFile != "" {
		v.errorf("metrics.bearer_token_file", "set at most one of bearer_token_env and bearer_token_file")
	}
	if c.Metrics.AllowUnauthenticatedControl && (c.Metrics.BearerTokenEnv != "" || c.Metrics.BearerTokenFile != "") {
		v.errorf("metrics.allow_unauthenticated_control", "has no effect with a bearer token; set one of them")
	}
	cp := &c.Checkpoints
	if cp.Interval != 0 && cp.Interval < 10*time.Millisecond {
		v.errorf("checkpoints.interval", "must be 0 (off) or >= 10ms, got %v", cp.Interval)
	}
	if cp.Timeout < 10*time.Millisecond {
		v.errorf("checkpoints.timeout", "must be >= 10ms, got %v", cp.Timeout)
	}
	if cp.MinPause < 0 {
		v.errorf("checkpoints.min_pause", "must be >= 0, got %v", cp.MinPause)
	}
	if cp.TolerableFailures < 0 {
		v.errorf("checkpoints.tolerable_failures", "must be >= 0, got %d", cp.TolerableFailures)
	}
	if cp.Retained < 1 {
		v.errorf("checkpoints.retained", "must be >= 1, got %d", cp.Retained)
	}
	c.validateRestart(v)
	v.oneOf("log.level", string(c.Log.Level),
		string(LogLevelDebug), string(LogLevelInfo), string(LogLevelWarn), string(LogLevelError))
	v.oneOf("log.format", string(c.Log.Format), string(LogFormatText), string(LogFormatJSON))
}

// validateNames checks that every stage has a unique name and returns the
// stages by name (the first, for a duplicate).
func (c *Config) validateNames(v *validator) map[string]stage {
	stages := map[string]stage{}
	uids := map[string]string{} // uid (or name without one) -> the path of what has it
	add := func(kind, list string, i int, name, uid string) {
		path := fmt.Sprintf("%s[%d]", list, i)
		if name == "" {
			v.required(path + ".name")
			return
		}
		if prev, dup := stages[name]; dup {
			v.errorf(path+".name", "duplicate name %q: %s already uses it", name, prev.path)
			return
		}
		stages[name] = stage{kind: kind, index: i, path: path}
		field, id := path+".name", name
		if uid != "" {
			field, id = path+".uid", uid
		}
		if prev, dup := uids[id]; dup {
			v.errorf(field, "duplicate uid %q: %s already has it (a uid defaults to the name); uids identify state in checkpoints and must be unique", id, prev)
			return
		}
		uids[id] = path
	}
	if len(c.Sources) == 0 {
		v.errorf("sources", "at least one source is required")
	}
	for i, s := range c.Sources {
		add("source", "sources", i, s.Name, s.UID)
	}
	for i, op := range c.Operators {
		add("operator", "operators", i, op.Name, op.UID)
	}
	if len(c.Sinks) == 0 {
		v.errorf("sinks", "at least one sink is required")
	}
	for i, s := range c.Sinks {
		add("sink", "sinks", i, s.Name, s.UID)
	}
	return stages
}

func (c *Config) validateSources(v *validator) {
	conns := c.connectors()
	for i := range c.Sources {
		s := &c.Sources[i]
		p := fmt.Sprintf("sources[%d]", i)
		f, known := conns.Source(s.Type)
		if !known { // "" too, when the registry has no kafka type
			v.oneOf(p+".type", s.Type, conns.SourceTypes()...)
		}
		if known {
			c.decodeConnParams(v, p+".params", s.Name, &s.Params, "source type "+f.Type, f.Params)
		}
		if s.Topics != nil || s.TopicPattern != "" {
			v.sourceTopics(p, s, known && f.Type == connector.DefaultType)
		} else if !known && s.Type == "" || known && f.Type == connector.DefaultType || s.Topic != "" {
			// an unknown type's fields are not known: a misspelt type (its
			// did-you-mean above) does not also get "topic: required"
			v.topic(p+".topic", s.Topic)
		}
		v.oneOf(p+".start_from", string(s.StartFrom), string(StartFromEarliest), string(StartFromLatest))
		if !known || f.Formats {
			c.validateFormat(v, p, s.Name, s.Format, &s.FormatParams, connector.RoleSource)
		}
		v.parallelism(p+".parallelism", s.Parallelism, 0)
		if s.OnError != "" {
			v.oneOf(p+".on_error", string(s.OnError), string(OnErrorFail), string(OnErrorSkip), string(OnErrorDeadLetter))
		}
		switch {
		case s.OnError == OnErrorDeadLetter && s.DeadLetterTopic == "":
			v.errorf(p+".dead_letter_topic", "required when on_error is dead-letter")
		case s.DeadLetterTopic != "":
			v.topic(p+".dead_letter_topic", s.DeadLetterTopic)
			if s.DeadLetterTopic == s.Topic || slices.Contains(s.Topics, s.DeadLetterTopic) {
				v.errorf(p+".dead_letter_topic", "must differ from the source's topic %q", s.DeadLetterTopic)
			}
			if re, err := source.CompileTopicPattern(s.TopicPattern); s.TopicPattern != "" && err == nil && source.MatchTopics(re, []string{s.DeadLetterTopic}) != nil {
				v.errorf(p+".dead_letter_topic", "must not match the source's topic_pattern %q", s.TopicPattern)
			}
		}
		if s.MaxRecordBytes < 0 {
			v.errorf(p+".max_record_bytes", "must be >= 0, got %d", s.MaxRecordBytes)
		}
		if d := s.PartitionDiscoveryInterval; d != 0 && d < 100*time.Millisecond {
			v.errorf(p+".partition_discovery_interval", "must be 0 (off) or >= 100ms, got %v", d)
		}
		if s.Timestamp.Unit != "" && !s.Timestamp.Expression.IsSet() {
			v.errorf(p+".timestamp.unit", "applies to timestamp.expression, which is not set")
		}
		if d := s.Timestamp.MaxAhead; d != 0 && d < time.Millisecond {
			v.errorf(p+".timestamp.max_ahead", "must be 0 (off) or >= 1ms, got %v", d)
		}
		if d := s.Watermark.OutOfOrderness; d < 0 {
			v.errorf(p+".watermark.out_of_orderness", "must be >= 0, got %v", d)
		}
		if d := s.Watermark.Idleness; d != 0 && d < 100*time.Millisecond {
			v.errorf(p+".watermark.idleness", "must be 0 (never idle) or >= 100ms, got %v", d)
		}
		if a := s.WatermarkAlignment; a != nil {
			ap := p + ".watermark_alignment"
			switch {
			case known && f.Type != connector.DefaultType:
				v.errorf(ap, "applies to kafka sources only, not to source type %s", f.Type)
			case a.MaxDrift == 0:
				v.errorf(ap+".max_drift", "required: how far ahead of its group's least watermark a partition may read, e.g. max_drift: 1s")
			case a.MaxDrift < time.Millisecond:
				v.errorf(ap+".max_drift", "must be >= 1ms, got %v", a.MaxDrift)
			}
			if d := a.UpdateInterval; d != 0 && d < time.Millisecond {
				v.errorf(ap+".update_interval", "must be 0 (100ms) or >= 1ms, got %v", d)
			}
		}
	}
}

// maxSuggestCandidates bounds the names a "did you mean" compares against.
const maxSuggestCandidates = 1000

// unknownRef reports a reference to a name no stage has.
func (v *validator) unknownRef(path, name, what string, stages map[string]stage) {
	if v.inputNames == nil {
		for n, s := range stages {
			if s.kind != "sink" {
				v.inputNames = append(v.inputNames, n)
			}
		}
		slices.Sort(v.inputNames)
		v.suggested = map[string]string{}
	}
	s, ok := v.suggested[name]
	if !ok && len(v.inputNames) <= maxSuggestCandidates {
		s = suggest(name, v.inputNames)
		v.suggested[name] = s
	}
	if s != "" {
		v.errorf(path, "no %s is called %q (did you mean %q?)", what, name, s)
		return
	}
	v.errorf(path, "no %s is called %q", what, name)
}

// formatParamsSuffix keys a vertex's format params in Config.connParams.
const formatParamsSuffix = ".format"

// connectors returns the connector registry the config was parsed with.
func (c *Config) connectors() *connector.Registry {
	if c.conns == nil {
		c.conns = job.NewBuiltinConnectors()
	}
	return c.conns
}

// decodeConnParams decodes a source's or sink's params (or, with key
// "<name>.format", its format's) strictly and keeps them for buildGraph.
func (c *Config) decodeConnParams(v *validator, path, key string, n *yaml.Node, what string, newParams func() any) {
	if pv, ok := c.decodeNode(v, path, n, what, newParams); ok && pv != nil {
		if c.connParams == nil {
			c.connParams = map[string]any{}
		}
		c.connParams[key] = pv
	}
}

// validateFormat checks the format of the source or sink at path (p):
// registered, usable in role, and its format_params.
func (c *Config) validateFormat(v *validator, p, name string, format RecordFormat, params *yaml.Node, role connector.Role) {
	conns := c.connectors()
	f, ok := conns.Format(string(format))
	switch {
	case !ok:
		// The built-in formats first, in graph.Formats order, as messages
		// always listed them.
		names := spellings(graph.Formats())
		for _, t := range conns.FormatTypes() {
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
		v.oneOf(p+".format", string(format), names...)
	case !f.Allows(role):
		v.errorf(p+".format", "format %s cannot be used by a %s", f.Type, role)
	default:
		c.decodeConnParams(v, p+".format_params", name+formatParamsSuffix, params, "format "+f.Type, f.Params)
		if rc, ok := c.connParams[name+formatParamsSuffix].(connector.RoleParamsChecker); ok {
			rc.CheckRole(role, func(field, msg string) { v.errorf(p+".format_params."+field, "%s", msg) })
		}
	}
}

// registry returns the operator registry the config was parsed with.
func (c *Config) registry() *operators.Registry {
	if c.reg == nil {
		return operators.NewBuiltinRegistry()
	}
	return c.reg
}

// typesWith lists, for messages, the registered types whose traits match.
func typesWith(reg *operators.Registry, match func(operators.Traits) bool) string {
	var out []string
	for _, t := range reg.Types() {
		if f, _ := reg.Lookup(t); match(f.Traits) {
			out = append(out, t)
		}
	}
	switch len(out) {
	case 0:
		return "none does"
	case 1:
		return "only " + out[0] + " does"
	}
	return "only " + strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1] + " do"
}

func (c *Config) validateOperators(v *validator, stages map[string]stage) {
	reg := c.registry()
	for i := range c.Operators {
		op := &c.Operators[i]
		p := fmt.Sprintf("operators[%d]", i)
		f, known := reg.Lookup(op.Type)
		if op.Type == "" {
			v.required(p + ".type")
		} else {
			v.oneOf(p+".type", op.Type, reg.Types()...)
		}
		twoIn := known && f.Traits.TwoInput()
		vin, side := c.SplitInput(op.Input)
		switch in, ok := stages[vin]; {
		case twoIn:
			c.validateSides(v, p, i, op, f, stages)
		case op.Inputs != nil && (known || op.Input == ""):
			v.errorf(p+".inputs", "operator type %s reads one input (input, key_by); inputs applies to two-input types: %s", op.Type, typesWith(reg, func(t operators.Traits) bool { return t.TwoInput() }))
		case op.Input == "":
			v.required(p + ".input")
		case !ok:
			v.unknownRef(p+".input", op.Input, "source or operator", stages)
		case in.kind == "sink":
			v.errorf(p+".input", "%q is a sink (%s); an input must be a source or an operator", op.Input, in.path)
		case in.kind == "operator" && in.index == i:
			v.errorf(p+".input", "an operator cannot read its own output")
		case side != "":
			c.checkSideOutput(v, p+".input", vin, side)
		}
		if op.KeyBy != "" && !twoIn {
			if _, err := c.keySelector(op.KeyBy); err != nil {
				v.errorf(p+".key_by", "%v", err)
			}
		}
		if known && f.Router != nil {
			if op.KeyBy != "" {
				v.errorf(p+".key_by", "operator type %s takes no key_by: it keys records itself (each rule's group_by)", op.Type)
			}
			if _, taken := stages[op.Name+operators.RulesRouteSuffix]; taken && op.Name != "" {
				v.errorf(p+".name", "%q needs the name %q for its routing stage, which another stage uses", op.Name, op.Name+operators.RulesRouteSuffix)
			}
		} else if known && f.Traits.Keyed && op.KeyBy == "" && !twoIn {
			v.errorf(p+".key_by", "required for operator type %s: a field path (such as user.id) or an expression giving the key", op.Type)
		}
		switch bc, ok := stages[op.Broadcast]; {
		case !known:
		case !f.Traits.Broadcast:
			if op.Broadcast != "" {
				v.errorf(p+".broadcast", "operator type %s takes no broadcast input; %s", op.Type, typesWith(reg, func(t operators.Traits) bool { return t.Broadcast }))
			}
		case op.Broadcast == "" && f.Traits.BroadcastTable:
			v.errorf(p+".broadcast", "required for operator type %s: the table source (table: true) broadcast to every subtask", op.Type)
		case op.Broadcast == "":
			v.errorf(p+".broadcast", "required for operator type %s: the source of the rules broadcast to every subtask", op.Type)
		case !ok:
			v.unknownRef(p+".broadcast", op.Broadcast, "source", stages)
		case bc.kind != "source":
			v.errorf(p+".broadcast", "%q is %s; a broadcast input must be a source", op.Broadcast, bc.path)
		case op.Broadcast == op.Input:
			v.errorf(p+".broadcast", "%q is also the input; the broadcast input must be another source", op.Broadcast)
		case f.Traits.BroadcastTable:
			if s, _ := c.SourceByName(op.Broadcast); !s.Table {
				v.errorf(p+".broadcast", "%q is not a table: operator type %s joins with a table; set table: true on %s", op.Broadcast, op.Type, bc.path)
			}
		}
		if op.AsyncState && known && !f.Traits.AsyncState {
			v.errorf(p+".async_state", "operator type %s has no async state version; %s", op.Type, typesWith(reg, func(t operators.Traits) bool { return t.AsyncState }))
		}
		v.parallelism(p+".parallelism", op.Parallelism, 0)
		if known {
			c.decodeParams(v, p, op, f)
			c.checkBroadcastTime(v, p, op)
			if ac, ok := c.params[op.Name].(operators.AsyncStateChecker); ok && op.AsyncState {
				ac.CheckAsyncState(func(field, msg string) { v.errorf(p+".params."+field, "%s", msg) })
			}
		}
	}
	c.validateGraph(v, stages)
	c.validateChangelogs(v)
}

// checkBroadcastTime reports an operator that holds records on its
// broadcast input's event time (operators.BroadcastTimeParams, rules with
// rule_time: event) when the broadcast source sets no watermark.idleness:
// a quiet broadcast topic would hold every record forever.
func (c *Config) checkBroadcastTime(v *validator, path string, op *OperatorConfig) {
	bt, ok := c.params[op.Name].(operators.BroadcastTimeParams)
	if !ok || !bt.UsesBroadcastTime() || op.Broadcast == "" {
		return
	}
	for i := range c.Sources {
		if s := &c.Sources[i]; s.Name == op.Broadcast && s.Watermark.Idleness == 0 {
			v.errorf(fmt.Sprintf("sources[%d].watermark.idleness", i), "required by %s (%s with rule_time: event, which holds each record until this source's watermark passes it): how long the topic may stay quiet before records stop waiting for it, e.g. 5s", path, op.Type)
		}
	}
}

// checkSideOutput reports an input naming side output side of operator op
// when op's type declares no such side output.
func (c *Config) checkSideOutput(v *validator, path, op, side string) {
	o, _ := c.OperatorByName(op)
	f, ok := c.registry().Lookup(o.Type)
	if !ok {
		return // the unknown type is reported at its own line
	}
	if slices.Contains(f.SideOutputs, side) {
		return
	}
	have := "it has none"
	if len(f.SideOutputs) > 0 {
		names := make([]string, len(f.SideOutputs))
		for i, s := range f.SideOutputs {
			names[i] = op + "." + s
		}
		have = "it has " + strings.Join(names, ", ")
	}
	v.errorf(path, "operator %q (type %s) has no side output %q; %s", op, o.Type, side, have)
}

func (c *Config) validateSinks(v *validator, stages map[string]stage) {
	conns := c.connectors()
	prefixes := map[string]string{} // transactional id prefix -> the path of the sink that has it
	for i := range c.Sinks {
		s := &c.Sinks[i]
		p := fmt.Sprintf("sinks[%d]", i)
		vin, side := c.SplitInput(s.Input)
		switch in, ok := stages[vin]; {
		case s.Input == "":
			v.required(p + ".input")
		case !ok:
			v.unknownRef(p+".input", s.Input, "operator or source", stages)
		case in.kind == "sink":
			v.errorf(p+".input", "%q is a sink (%s); an input must be an operator or a source", s.Input, in.path)
		case side != "":
			c.checkSideOutput(v, p+".input", vin, side)
		}
		f, known := conns.Sink(s.Type)
		if !known { // "" too, when the registry has no kafka type
			v.oneOf(p+".type", s.Type, conns.SinkTypes()...)
		}
		if known {
			c.decodeConnParams(v, p+".params", s.Name, &s.Params, "sink type "+f.Type, f.Params)
		}
		// an unknown type's fields are not known: a misspelt type (its
		// did-you-mean above) does not also get "topic: required"
		if known && f.Type != connector.DefaultType {
			c.checkSinkFields(v, p, f)
		}
		if !known && s.Type == "" || known && f.Type == connector.DefaultType || s.Topic != "" && (!known || f.Reads("topic")) {
			v.topic(p+".topic", s.Topic)
		}
		v.oneOf(p+".delivery", string(s.Delivery), spellings(graph.Deliveries())...)
		if known && s.Delivery.Valid() && !f.Supports(s.Delivery) {
			v.errorf(p+".delivery", "sink type %s does not support %s; it supports %s", f.Type, s.Delivery, strings.Join(spellings(f.Deliveries), ", "))
		}
		if s.Format != "" {
			if known && !f.Formats {
				v.errorf(p+".format", "sink type %s takes no format", f.Type)
			} else {
				c.validateFormat(v, p, s.Name, s.Format, &s.FormatParams, connector.RoleSink)
			}
		} else if s.FormatParams.Kind != 0 && s.FormatParams.ShortTag() != "!!null" {
			v.errorf(p+".format_params", "applies to format, which is not set")
		}
		if s.Delivery == DeliveryExactlyOnce {
			iv, cto := c.Checkpoints.Interval, max(c.Checkpoints.Timeout, 0)
			switch {
			case iv == 0 && c.src != nil && c.src.bad["checkpoints.interval"]:
				// set but not a duration: reported there, not as unset
			case iv == 0:
				v.errorf(p+".delivery", "exactly-once needs checkpoints: set checkpoints.interval (transactions commit when a checkpoint completes)")
			case !c.Cluster.Enabled && s.TransactionTimeout != 0 && s.TransactionTimeout <= iv+cto:
				// cluster mode checks a larger bound naming more terms (validateCluster)
				v.errorf(p+".transaction_timeout", "%v must exceed checkpoints.interval %v + checkpoints.timeout %v%s = %v, plus the time a restart takes: a pre-committed transaction waits for its checkpoint, and the broker aborts it after this timeout (its output would be lost); raise it or lower checkpoints.interval or checkpoints.timeout",
					s.TransactionTimeout, iv, cto, c.timeoutNote(), iv+cto)
			}
		}
		if s.Delivery == DeliveryExactlyOnce && (!known && s.Type == "" || known && f.Type == connector.DefaultType) {
			// Two sinks of one job writing under the same transactional ids
			// fence each other: each one's producer (and recovery) aborts
			// the other's open transactions.
			field := p + ".name"
			if s.TransactionalIDPrefix != "" {
				field = p + ".transactional_id_prefix"
			}
			prefix := c.TransactionalIDPrefix(s)
			if prev, dup := prefixes[prefix]; dup {
				v.errorf(field, "transactional id prefix %q is also %s's: two exactly-once sinks would fence each other's transactions; set another transactional_id_prefix", prefix, prev)
			} else {
				prefixes[prefix] = p
			}
		}
		if s.BufferThreshold < 0 {
			v.errorf(p+".buffer_threshold", "must be >= 0, got %d", s.BufferThreshold)
		} else if s.BufferThreshold > 0 && s.Delivery != DeliveryAtLeastOnce {
			v.errorf(p+".buffer_threshold", "buffering applies to at-least-once sinks, this one is %s", s.Delivery)
		}
		if s.PoolSize != 0 && (s.PoolSize < 3 || s.PoolSize > sink.MaxPoolSize) {
			v.errorf(p+".pool_size", "must be in [3, %d], got %d", sink.MaxPoolSize, s.PoolSize)
		}
		v.parallelism(p+".parallelism", s.Parallelism, 0)
	}
}

// checkSinkFields refuses the sink-level settings of sink p (one of
// connector.KafkaSinkFields) written in the file that its type f does not
// read: they would be ignored.
func (c *Config) checkSinkFields(v *validator, p string, f *connector.SinkFactory) {
	for _, field := range connector.KafkaSinkFields() {
		if _, written := c.src.keyWritten(p + "." + field); written && !f.Reads(field) {
			v.errorf(p+"."+field, "sink type %s does not read it (a setting of the kafka type); its settings go in params", f.Type)
		}
	}
}

func (c *Config) validateDemo(v *validator) {
	d := &c.Demo
	if math.IsNaN(d.ItemsPerSecond) || math.IsInf(d.ItemsPerSecond, 0) || d.ItemsPerSecond <= 0 {
		v.errorf("demo.items_per_second", "must be a finite number > 0, got %v", d.ItemsPerSecond)
	}
	if d.Kind != "" {
		v.oneOf("demo.kind", d.Kind, "shapes", "transactions")
	}
	if !d.Enabled {
		return
	}
	sourceTopic := func(path, t string) {
		if t == "" {
			v.errorf(path, "required when demo.enabled is true")
			return
		}
		if !slices.ContainsFunc(c.Sources, func(s SourceConfig) bool { return s.Topic == t }) {
			v.errorf(path, "no source reads topic %q; the demo writes only to source topics", t)
		}
	}
	sourceTopic("demo.items_topic", d.ItemsTopic)
	sourceTopic("demo.rules_topic", d.RulesTopic)
	if d.ItemsTopic != "" && d.ItemsTopic == d.RulesTopic {
		v.errorf("demo.rules_topic", "%q is also demo.items_topic; items and rules need their own topics", d.RulesTopic)
	}
}

// restartFields are the restart fields each strategy reads.
var restartFields = map[RestartStrategy][]string{
	RestartExponentialDelay: {"initial_backoff", "max_backoff", "backoff_multiplier", "jitter_factor", "reset_backoff_threshold", "attempts_before_reset"},
	RestartFixedDelay:       {"attempts", "delay"},
	RestartFailureRate:      {"max_failures_per_interval", "failure_rate_interval", "delay"},
	RestartNone:             {},
}

func (c *Config) validateRestart(v *validator) {
	r := &c.Restart
	fields, ok := restartFields[r.Strategy]
	if !ok {
		v.oneOf("restart.strategy", string(r.Strategy), string(RestartExponentialDelay), string(RestartFixedDelay), string(RestartFailureRate), string(RestartNone))
		return
	}
	// A field of another strategy is a mistake (a typo in strategy, or a
	// leftover): refuse it rather than ignore it.
	for _, f := range []string{"initial_backoff", "max_backoff", "backoff_multiplier", "jitter_factor", "reset_backoff_threshold",
		"attempts_before_reset", "attempts", "delay", "max_failures_per_interval", "failure_rate_interval"} {
		if _, written := c.src.keyWritten("restart." + f); written && !slices.Contains(fields, f) {
			v.errorf("restart."+f, "does not apply to strategy %s (it reads: %s)", r.Strategy, strings.Join(append([]string{"strategy"}, fields...), ", "))
		}
	}
	switch r.Strategy {
	case RestartExponentialDelay:
		if r.InitialBackoff <= 0 {
			v.errorf("restart.initial_backoff", "must be > 0, got %v", r.InitialBackoff)
		}
		if r.MaxBackoff < r.InitialBackoff {
			v.errorf("restart.max_backoff", "must be >= restart.initial_backoff %v, got %v", r.InitialBackoff, r.MaxBackoff)
		}
		if !(r.BackoffMultiplier >= 1) || math.IsInf(r.BackoffMultiplier, 0) {
			v.errorf("restart.backoff_multiplier", "must be finite and >= 1, got %v", r.BackoffMultiplier)
		}
		if !(r.JitterFactor >= 0 && r.JitterFactor <= 1) {
			v.errorf("restart.jitter_factor", "must be in [0, 1], got %v", r.JitterFactor)
		}
		if r.ResetBackoffThreshold <= 0 {
			v.errorf("restart.reset_backoff_threshold", "must be > 0, got %v", r.ResetBackoffThreshold)
		}
		if r.AttemptsBeforeReset < 0 {
			v.errorf("restart.attempts_before_reset", "must be >= 0 (0: no limit), got %d", r.AttemptsBeforeReset)
		}
	case RestartFixedDelay, RestartFailureRate:
		if r.Delay < 0 {
			v.errorf("restart.delay", "must be >= 0, got %v", r.Delay)
		}
		if r.Strategy == RestartFixedDelay && r.Attempts < 0 {
			v.errorf("restart.attempts", "must be >= 0, got %d", r.Attempts)
		}
		if r.Strategy == RestartFailureRate {
			if r.MaxFailuresPerInterval < 1 {
				v.errorf("restart.max_failures_per_interval", "must be >= 1, got %d", r.MaxFailuresPerInterval)
			}
			if r.FailureRateInterval <= 0 {
				v.errorf("restart.failure_rate_interval", "must be > 0, got %v", r.FailureRateInterval)
			}
		}
	}
}

// timeoutNote says where checkpoints.timeout came from when the file did
// not set it: " (derived from transaction_timeout)" or " (default)".
func (c *Config) timeoutNote() string {
	switch _, written := c.src.keyWritten("checkpoints.timeout"); {
	case written || c.src == nil:
		return ""
	case c.derivedTimeout:
		return " (derived from transaction_timeout: not set in the file)"
	default:
		return " (the default: not set in the file)"
	}
}
