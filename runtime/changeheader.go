package runtime

// ChangeHeader is the Kafka record header that carries a record's
// ChangeKind on a topic written in header mode (a sink with changelog:
// header, and every cluster-mode repartition topic): its value is the
// kind's short form, "+I", "-U", "+U" or "-D" (ChangeKind.String). A
// source reading a topic as a header-mode changelog (sources[].changelog:
// header, and every repartition source) sets Record.Change from it and
// removes it from the record's headers; a record without it is an insert.
const ChangeHeader = "kstreamd-change"

// ParseChangeKind returns the ChangeKind whose short form is s ("+I",
// "-U", "+U" or "-D"), false for anything else.
func ParseChangeKind(s string) (ChangeKind, bool) {
	for _, c := range []ChangeKind{ChangeInsert, ChangeUpdateBefore, ChangeUpdateAfter, ChangeDelete} {
		if s == c.String() {
			return c, true
		}
	}
	return 0, false
}
