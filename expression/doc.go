// Package expression is kstreamd's single expression layer: filters,
// projections and flat_map selectors in a pipeline, and rules read from a
// Kafka topic, are all expressions in the Common Expression Language (CEL,
// https://cel.dev) evaluated by cel.dev/cel-go behind this small wrapper.
// An expression is compiled once ([Compile]) and evaluated per record
// ([Program.Eval], [Program.EvalBool], [Program.EvalList]).
//
// CEL was chosen over expr-lang/expr because rules are untrusted data: CEL
// bounds one evaluation by a cost limit (work, including comprehensions
// over a record's lists), estimates the cost at compile time, and reports a
// missing identifier lazily; expr's memory budget does not bound CPU (a
// 30-byte expr expression doubles a string per step until memory runs
// out). CEL is slower per evaluation, 0.2-3µs for the record shapes of
// bench_test.go, which is still less than DecodeJSON of such a record.
//
// # Names
//
// An expression sees one record ([Input]) through these names:
//
//   - every top-level field of a JSON-object value, as a bare identifier:
//     amount > 100, user.country == 'NL', tx.type == 'card';
//   - value: the whole decoded value, of any JSON type;
//   - key: the Kafka key as a string, or null when the record has none;
//   - timestamp: the record time, int milliseconds since the Unix epoch;
//   - headers: a map of header key to string value (the last value wins
//     when a key repeats);
//   - topic: the Kafka topic the record was read from (a source over
//     several topics or a topic_pattern), "" when not known.
//
// The reserved names value, key, timestamp, headers and topic win over fields of
// the same name; such a field is still reachable as value.key or
// value["key"]. A field whose name is not a CEL identifier (a keyword such
// as in or for, or x-id) is reachable only by index: value["x-id"].
//
// A bare identifier that is neither reserved nor a field of the record is an
// evaluation error, never a silent null: the record must be reported. It is
// an error only when evaluation reaches it: type == 'card' && card.ok is
// false, not an error, on a record of another type without a card field
// (CEL's && and || absorb an error when the other side decides the result). For
// optional data use the value prefix and CEL's presence test or optional
// chaining: has(value.card), value.?card.ok.orValue(false), or
// 'trace' in headers. value.card and user.missing on an absent key are
// errors ("no such key"); value.?card yields an optional, and an optional
// result of an expression is returned as its value or nil.
//
// # Types
//
// Values are what [DecodeJSON] returns: objects are maps, arrays lists,
// integers that fit int64 are CEL int, other numbers CEL double. CEL
// compares int and double with each other (amount > 99.5 works), but does
// not mix them in arithmetic: amount * 1.5 is an evaluation error when
// amount is an int; write double(amount) * 1.5. Integer arithmetic that
// overflows int64 is an error, not a wrap.
//
// # Limits
//
// [Compile] refuses an expression longer than [Limits].MaxLength bytes or
// with more than MaxNodes syntax nodes, and one whose estimated minimum cost
// already exceeds MaxCost. An evaluation that would exceed MaxCost stops
// with an [*EvalError]. Expressions whose estimated worst case is within
// MaxCost run without cost tracking, which is cheaper.
//
// # Usage
//
//	p, err := expression.Compile(`user.country == 'NL' && amount >= 10`,
//		expression.ExpectBool())
//	if err != nil {
//		var ce *expression.CompileError // Line, Column within the expression
//		...
//	}
//	v, err := expression.DecodeJSON(record.Value)
//	...
//	env := expression.NewEnv(&expression.Input{
//		Value: v, Key: record.Key, Timestamp: record.Timestamp,
//	})
//	keep, err := p.EvalBool(env) // err is an *EvalError naming the expression
//
// Build one [Env] per record and pass it to every Program that evaluates on
// that record; an operator goroutine may reuse one Env across records with
// [Env.Reset]. A [Program] is immutable and safe for concurrent use by
// several goroutines; an Env is not.
package expression
