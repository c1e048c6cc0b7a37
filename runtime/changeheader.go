package runtime

// ChangeHeader is the Kafka record header that carries a record's
// ChangeKind on a topic written in header mode (a sink with changelog:
// header, and every cluster-mode repartition topic): its value is the
// kind's short form, "+I", "-U", "+U" or "-D" (ChangeKind.String). A
// source reading a topic as a header-mode changelog (sources[].changelog:
// header, and every repartition source) sets Record.Change from it and
// removes it from the record's headers; a record without it is an insert.
const ChangeHeader = "kstreamd-change"

// ChangelogModeHeader is the Kafka record header a header-mode sink adds,
// with the value UpsertChangelogMode, to every record of an upsert
// changelog (a table's +U per upsert without the -U of the row it
// replaces, -D per tombstone), so that a reader can tell it from a full
// changelog: a source reading such a record with changelog: header (a
// full changelog) fails instead of letting an aggregate count every
// upsert without retracting the row it replaces, and one reading with
// changelog: upsert_header accepts it. Like ChangeHeader, a header-mode
// source removes it from the record's headers. A full changelog's records
// do not carry it.
const ChangelogModeHeader = "kstreamd-changelog"

// UpsertChangelogMode is the value of ChangelogModeHeader on a record of
// an upsert changelog.
const UpsertChangelogMode = "upsert"

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
