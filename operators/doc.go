// Package operators holds the user-function interfaces of kstreamd
// (KeyedProcessFunction, KeyedBroadcastProcessFunction, after Apache Flink's
// classes of the same names), the operators that drive them on a subtask
// goroutine, and the built-in functions a pipeline file can name: the
// shape-pair matcher of the reference job (ShapePairMatcher).
//
// A keyed operator owns one keyed state backend per subtask. Before user code
// sees a record, the operator sets the backend's current key to the record's
// key, so every state handle reads and writes that key's state (Flink's
// keyed state scoping).
package operators
