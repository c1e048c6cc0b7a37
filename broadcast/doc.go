// Package broadcast holds broadcast state and rule decoding for keyed
// broadcast operators, following Apache Flink's broadcast state pattern: a
// low-volume stream (the rules) is sent to every parallel subtask of an
// operator and kept there in broadcast state, a named map that only the
// broadcast side may write (BroadcastState) and the keyed side may only read
// (ReadOnlyBroadcastState). Every subtask holds the same copy because every
// subtask sees the same broadcast records in the same order.
package broadcast
